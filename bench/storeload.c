/* storeload.c: placeholder until its owner writes it. */
#include "config.h"
int main(void) { return 0; }
