/* cpu.c: being written (worker engineer). */
