/* store.c: being written (worker engineer). */
