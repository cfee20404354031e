/* client.c: placeholder until its owner writes it. */
#include "config.h"
