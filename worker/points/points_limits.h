/*  points_limits.h: the limits of the order-points domain, with their units
    in the names. */
#ifndef ONCEQ_POINTS_LIMITS_H
#define ONCEQ_POINTS_LIMITS_H

/* Points granted by one order: a payload beyond this is a producer bug. */
#define OQ_MAX_POINTS 1000000

#endif
