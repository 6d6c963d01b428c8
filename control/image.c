/* The cluster metadata image (see image.h): not written yet. */
#include "control/image.h"
