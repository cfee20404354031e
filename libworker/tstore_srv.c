/* tstore_srv.c: being written (worker engineer). */
