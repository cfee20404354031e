/* comm.c: being written (worker engineer). */
