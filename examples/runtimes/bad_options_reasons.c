/* bad_options_reasons.c — the C API's answer to each bad value of
 * tests/bad_options.txt, written for the runtimes' table-driven tests
 * (Lua, Guile, Node, .NET, the PyTorch plug-in), which cannot all call
 * gcpressure_options_set themselves: each feeds every row to its own entry
 * points and expects this text after its own name for the option (Note [One
 * error per bad value], core/src/config_detail.hpp).
 *
 *   bad_options_reasons IN OUT
 *
 * OUT has one line per row: OPTION <tab> VALUE <tab> REASON, REASON being
 * what follows "invalid value for OPTION: " in the C API's message (the
 * quoted value and why it is wrong). Exits 1, writing nothing, if a row is
 * accepted or gets another kind of message: the table itself is then wrong. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gcpressure/gcpressure.h"

static char* trim(char* s) {
  while (*s == ' ' || *s == '\t') ++s;
  char* e = s + strlen(s);
  while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) *--e = '\0';
  return s;
}

/* The reason of one row into out (cap bytes); 0, or 1 with a message. */
static int reason_of(const char* name, const char* value, char* out, size_t cap) {
  gcpressure_options o;
  gcpressure_options_init(&o);
  if (gcpressure_options_set(&o, name, value) == GCPRESSURE_OK) {
    fprintf(stderr, "bad_options_reasons: %s = '%s' is accepted by gcpressure_options_set\n", name, value);
    return 1;
  }
  char key[128];
  snprintf(key, sizeof key, "gcpressure: invalid value for %s: ", name);
  const char* msg = gcpressure_last_error();
  const char* at = strstr(msg, key);
  if (!at) {
    fprintf(stderr, "bad_options_reasons: %s = '%s': no '%s' in: %s\n", name, value, key, msg);
    return 1;
  }
  snprintf(out, cap, "%s", at + strlen(key));
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: bad_options_reasons tests/bad_options.txt OUT\n");
    return 2;
  }
  FILE* in = fopen(argv[1], "r");
  if (!in) {
    perror(argv[1]);
    return 2;
  }
  /* Everything is built in memory first: a failed row leaves no OUT behind. */
  size_t cap = 1 << 16, len = 0;
  char* text = malloc(cap);
  char line[512];
  int rows = 0, bad = 0;
  while (text && fgets(line, sizeof line, in)) {
    if (line[0] == '#' || line[0] == '\n') continue;
    char* bar = strstr(line, " | ");
    if (!bar) {
      fprintf(stderr, "bad_options_reasons: no ' | ' in: %s", line);
      bad = 1;
      continue;
    }
    *bar = '\0';
    const char* name = trim(line);
    char* value = bar + 3;
    value[strcspn(value, "\r\n")] = '\0';
    char reason[512];
    if (reason_of(name, value, reason, sizeof reason)) {
      bad = 1;
      continue;
    }
    const int n = snprintf(text + len, cap - len, "%s\t%s\t%s\n", name, value, reason);
    if (n < 0 || (size_t)n >= cap - len) {
      fprintf(stderr, "bad_options_reasons: %s is too large\n", argv[1]);
      bad = 1;
      break;
    }
    len += (size_t)n;
    ++rows;
  }
  fclose(in);
  if (!text || bad || rows == 0) {
    if (rows == 0 && !bad) fprintf(stderr, "bad_options_reasons: no rows in %s\n", argv[1]);
    free(text);
    return 1;
  }
  FILE* out = fopen(argv[2], "w");
  if (!out || fwrite(text, 1, len, out) != len || fclose(out) != 0) {
    perror(argv[2]);
    free(text);
    return 2;
  }
  free(text);
  return 0;
}
