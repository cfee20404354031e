/* shm.c: being written (worker engineer). */
