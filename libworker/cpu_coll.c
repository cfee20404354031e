/* cpu_coll.c: being written (worker engineer). */
