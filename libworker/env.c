/* env.c: being written (worker engineer). */
