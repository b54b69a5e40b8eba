/*  mpjson.h: conversion between JSON (jansson) and msgpack, for the onceq
    command line tool. JSON in: what a person types as a job payload. JSON out:
    any reply of the broker, converted without knowing its shape, so that a
    field added to the protocol shows up in --json output without a change
    here. */
#ifndef ONCEQ_CLI_MPJSON_H
#define ONCEQ_CLI_MPJSON_H

#include <jansson.h>
#include <msgpack.h>
#include <stddef.h>

/* Pack a JSON value with pk: objects become maps, arrays arrays, strings
   str, integers int or uint, reals float64, true/false bool and null nil.
   Nothing is packed if the value nests deeper than max_depth levels. Returns
   0, or -1 with a reason in why[why_len]. */
int oq_mpjson_pack(msgpack_packer *pk, json_t *value, int max_depth, char *why, size_t why_len);

/* "an object", "an array", "a string", "a number", "a boolean" or "null",
   for messages. Borrowed static text. */
const char *oq_mpjson_kind(const json_t *value);

/* Convert a msgpack object to a new JSON value (release with json_decref), or
   NULL if out of memory. Strings that are not valid UTF-8 get U+FFFD for each
   bad byte; bin becomes a base64 string and ext {"ext": type, "data": base64};
   a map key that is not a string becomes its JSON text; a uint above 2^63-1
   becomes a decimal string, so that no digit is lost. */
json_t *oq_mpjson_from_object(const msgpack_object *o);

#endif
