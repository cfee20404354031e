/* reduce.c: being written (worker engineer). */
