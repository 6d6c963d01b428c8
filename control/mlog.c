/* The metadata log window (see mlog.h): not written yet. */
#include "control/mlog.h"
