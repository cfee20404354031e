/* worker.h: internal header of librdzvworker (being written). */
