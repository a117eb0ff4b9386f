/*
** models.c — which model a connection uses, and the process-wide
** registry that lets every connection share one loaded copy of a model.
**
** Registry: loaded models keyed by the canonical path of their directory
** (realpath), each with a count of the connections using it.  A model is
** loaded on first use, shared by every connection that names the same
** directory, and released when the last of them lets go.  Models are
** immutable after loading, so sharing needs no locking beyond the registry's
** own mutex.
**
** The model of a connection (conn.c asks for it on the connection's first
** use):
**   1. the directory given to SELECT bert_load('dir') on this connection;
**   2. otherwise the directory in the environment variable BERTFILL_MODEL;
**   3. otherwise the model shipped with bertfill, model/bertfill-zh-tiny,
**      looked for only where a checkout or an install puts it: next to
**      bertfill.so (a checkout's ./bertfill.so), two levels up (a checkout's
**      build/asan/bertfill.so, build/tsan/...), then ../share/bertfill/
**      bertfill-zh-tiny from the directory holding bertfill.so (where
**      `make install` puts it: $PREFIX/lib/bertfill.so finds
**      $PREFIX/share/bertfill/bertfill-zh-tiny whatever PREFIX or DESTDIR
**      was); then BERTFILL_DEFAULT_MODEL when that was defined at compile
**      time (a packager's choice, used as it is).
** A model found next to bertfill.so or above it is used only if every
** directory from there down to the model's (model/ and model/bertfill-zh-tiny,
** or share/, share/bertfill/ and share/bertfill/bertfill-zh-tiny) belongs to
** the owner of bertfill.so or to root and is writable by its owner alone
** (and its group when that is the owner's own group: group_of_owner_alone)
** (trusted_below).  A copy of bertfill.so in a folder anyone can write to
** (/tmp/x/bertfill.so) would otherwise take a model planted by another user
** two levels up (/tmp/model/...) or in /tmp/share/bertfill/: such a model
** is passed over, and the "no model" error says which and why.
** With none of these, every function fails with a message that says how to
** provide a model.
**
** Precision (bertfill.h: fp32 or int8): bert_load's second argument, else
** the environment variable BERTFILL_PRECISION, else fp32.  The registry
** keys a model by directory and precision: an fp32 and an int8 load of one
** directory are two models, used side by side.
*/
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "models.h"
#include "stats.h"
#include "util.h"

#define DEFAULT_MODEL_NAME "model/bertfill-zh-tiny"
#define INSTALLED_MODEL_NAME "share/bertfill/bertfill-zh-tiny" /* from the .so's ../ */
#define MAX_CANDIDATES 6

/* What a model directory is, and how to name one: the advice of the errors
** "no model" and "cannot open model directory".  When the directory came
** from BERTFILL_MODEL, the advice is to fix or unset it instead. */
#define MODEL_DIR_IS \
  "A model directory holds config.json, vocab.txt and model.safetensors, e.g. those of " \
  "bert-base-chinese from the Hugging Face hub " \
  "(https://huggingface.co/google-bert/bert-base-chinese)."
#define HOWTO \
  "Load one with SELECT bert_load('/path/to/model-dir') or set the environment variable " \
  "BERTFILL_MODEL=/path/to/model-dir.  " MODEL_DIR_IS
#define HOWTO_ENV \
  "Point BERTFILL_MODEL at a model directory, or unset it to use the shipped model, or load " \
  "one with SELECT bert_load('/path/to/model-dir').  " MODEL_DIR_IS

typedef struct reg_ent {
  char *path;             /* canonical directory */
  bf_precision precision; /* loads in other precisions are other entries */
  bf_model *m;
  int users; /* connections using it */
  int stale; /* its file was replaced or changed: no new users */
  struct reg_ent *next;
} reg_ent;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static reg_ent *reg_head;

/* Fork.  reg_mu is held for a whole load (seconds): a fork() meanwhile, from
** another thread, would leave it held forever in the child.  The child
** (pthread_atfork) gets a fresh mutex and the registry as it was; the load
** in progress is not in it (an entry goes in whole at the end of a load),
** and the child loads that model itself when it needs it. */
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;
static void reg_forget_lock_in_child(void) { pthread_mutex_init(&reg_mu, NULL); }
static void reg_at_fork(void) { pthread_atfork(NULL, NULL, reg_forget_lock_in_child); }

/* The registry's mutex, taken (the fork handler set up on first use). */
static void reg_lock(void) {
  pthread_once(&reg_once, reg_at_fork);
  pthread_mutex_lock(&reg_mu);
}

/* Load (or share) the model in dir.  On failure *err says why; from (may be
** "") follows the directory's name in the message, howto is the advice when
** the directory cannot be opened. */
static bf_model *registry_get(const char *dir, bf_precision precision, const char *from,
                              const char *howto, char **err) {
  char canon[PATH_MAX];
  bfx_quote q;
  if (!realpath(dir, canon)) {
    *err = sqlite3_mprintf("bertfill: cannot open model directory '%s'%s: %s.  %s",
                           bfx_quoted(&q, dir, -1), from, strerror(errno), howto);
    return NULL;
  }
  bf_model *m = NULL;
  reg_lock();
  for (reg_ent *e = reg_head; e; e = e->next) {
    if (e->stale || e->precision != precision || strcmp(e->path, canon) != 0) continue;
    /* model.safetensors replaced (rename) or changed since it was loaded:
    ** connections using it keep it; new ones get the new version */
    if (!bf_model_is_current(e->m)) {
      e->stale = 1;
      continue;
    }
    e->users++;
    m = e->m;
    break;
  }
  if (!m) {
    /* Loading under the lock: a second connection asking for the same
    ** directory waits for this load instead of loading a second copy. */
    char msg[512];
    msg[0] = 0;
    reg_ent *e = malloc(sizeof *e);
    char *path = strdup(canon);
    if (!e || !path) {
      free(e);
      free(path);
      *err = NULL; /* out of memory */
    } else if (!(m = bf_model_load_as(canon, precision, msg, sizeof msg))) {
      free(e);
      free(path);
      if (strstr(msg, "out of memory")) *err = NULL; /* reported as SQLITE_NOMEM */
      else
        *err = sqlite3_mprintf("bertfill: cannot load the model in '%s'%s: %s",
                               bfx_quoted(&q, dir, -1), from, msg[0] ? msg : "unknown error");
    } else {
      e->path = path;
      e->precision = precision;
      e->m = m;
      e->users = 1;
      e->stale = 0;
      e->next = reg_head;
      reg_head = e;
    }
  }
  pthread_mutex_unlock(&reg_mu);
  return m;
}

static void registry_put(bf_model *m) {
  bf_model *drop = NULL;
  reg_lock();
  for (reg_ent **pp = &reg_head; *pp; pp = &(*pp)->next) {
    reg_ent *e = *pp;
    if (e->m == m) {
      if (--e->users == 0) {
        *pp = e->next;
        drop = e->m;
        free(e->path);
        free(e);
      }
      break;
    }
  }
  pthread_mutex_unlock(&reg_mu);
  if (drop) bf_model_release(drop);
}

int bfx_models_loaded(void) {
  int n = 0;
  reg_lock();
  for (reg_ent *e = reg_head; e; e = e->next) n++;
  pthread_mutex_unlock(&reg_mu);
  return n;
}

/* ---- where the extension file is ---- */
static char ext_path[PATH_MAX];
static pthread_once_t ext_once = PTHREAD_ONCE_INIT;

static void find_ext_path(void) {
  Dl_info info;
  if (dladdr((void *)&bfx_extension_path, &info) && info.dli_fname) {
    if (!realpath(info.dli_fname, ext_path)) {
      strncpy(ext_path, info.dli_fname, sizeof ext_path - 1);
      ext_path[sizeof ext_path - 1] = 0;
    }
  }
}

const char *bfx_extension_path(void) {
  pthread_once(&ext_once, find_ext_path);
  return ext_path;
}

/* Keep this library loaded for the life of the process.  SQLite dlclose()s
** an extension when the last connection that loaded it closes, but the
** loaded models, the LRU and the engine's worker threads are process-wide
** and outlive any one connection: unloading the code under them would
** crash the next call (or the worker threads at once). */
static pthread_once_t pin_once = PTHREAD_ONCE_INIT;
static void pin(void) {
  const char *so = bfx_extension_path();
  if (so[0]) dlopen(so, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}
void bfx_pin_library(void) { pthread_once(&pin_once, pin); }

/* The default model's candidate directories: each a path, and how much of
** it is the base (the directory of bertfill.so or one above it) below which
** every directory must pass trusted_below, unless checked is 0 (the
** compile-time BERTFILL_DEFAULT_MODEL, used as it is). */
typedef struct {
  char path[PATH_MAX];
  size_t base_len;
  int checked;
} candidate;

/* Append base/name to out[*n] (up to max) unless it is there already. */
static void add_candidate(candidate *out, int *n, int max, const char *base, const char *name) {
  char cand[PATH_MAX + 64];
  const char *b = strcmp(base, "/") ? base : "";
  snprintf(cand, sizeof cand, "%s/%s", b, name);
  for (int j = 0; j < *n; j++)
    if (strcmp(out[j].path, cand) == 0) return;
  if (*n < max && strlen(cand) < PATH_MAX) {
    strcpy(out[*n].path, cand);
    out[*n].base_len = strlen(b);
    out[(*n)++].checked = 1;
  }
}

/* Candidate directories for the default model, in order (up to max). */
static int default_candidates(candidate *out, int max) {
  int n = 0;
  const char *so = bfx_extension_path();
  if (so[0]) {
    char dir[PATH_MAX];
    strncpy(dir, so, sizeof dir - 1);
    dir[sizeof dir - 1] = 0;
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else strcpy(dir, ".");
    /* a checkout: ./bertfill.so, build/asan/bertfill.so; an install:
    ** $PREFIX/lib/bertfill.so with the model in $PREFIX/share */
    static const struct {
      const char *up, *name;
    } where[] = {{"", DEFAULT_MODEL_NAME},
                 {"/../..", DEFAULT_MODEL_NAME},
                 {"/..", INSTALLED_MODEL_NAME}};
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
      char p[PATH_MAX + 8], base[PATH_MAX];
      snprintf(p, sizeof p, "%s%s", dir, where[i].up);
      if (realpath(p, base)) add_candidate(out, &n, max, base, where[i].name);
    }
  }
#ifdef BERTFILL_DEFAULT_MODEL
  if (n < max && strlen(BERTFILL_DEFAULT_MODEL) < PATH_MAX) {
    strcpy(out[n].path, BERTFILL_DEFAULT_MODEL);
    out[n].base_len = 0;
    out[n++].checked = 0;
  }
#endif
  return n;
}

/* Whether the default model c may be used: every directory of c->path below
** its base (model/, then model/bertfill-zh-tiny, ...) is owned by the owner
** of bertfill.so or by root, and writable by its owner alone (its group too
** when that group is the owner's alone: group_of_owner_alone).  A directory
** that another user made, or can write to, could hold a model planted by
** that user.  When not, *why (sqlite3_malloc'ed; NULL when out of memory)
** says which directory and what is wrong. */
/* 1 when the group of st is its owner's alone: a user private group (the
** owner's primary group, with no other member listed), as Debian and
** Ubuntu give every user, whose umask 002 makes folders group-writable;
** or a group whose one listed member is the owner.  Else 0. */
static int group_of_owner_alone(const struct stat *st) {
  struct passwd pw, *pwp = NULL;
  struct group gr, *grp = NULL;
  char pbuf[4096], gbuf[16384];
  if (getpwuid_r(st->st_uid, &pw, pbuf, sizeof pbuf, &pwp) != 0 || !pwp ||
      getgrgid_r(st->st_gid, &gr, gbuf, sizeof gbuf, &grp) != 0 || !grp)
    return 0;
  char **mem = gr.gr_mem;
  if (!mem || !mem[0]) return pw.pw_gid == gr.gr_gid;
  return !mem[1] && strcmp(mem[0], pw.pw_name) == 0;
}

static int trusted_below(const candidate *c, char **why) {
  struct stat so_st, st;
  if (!c->checked) return 1;
  if (stat(bfx_extension_path(), &so_st) != 0) {
    *why = sqlite3_mprintf("%s not used: cannot stat bertfill.so (%s)", c->path, strerror(errno));
    return 0;
  }
  char p[PATH_MAX];
  strcpy(p, c->path);
  for (size_t i = c->base_len + 1;; i++) {
    if (p[i] != '/' && p[i] != 0) continue;
    char keep = p[i];
    p[i] = 0;
    int rc = stat(p, &st);
    if (rc != 0) {
      *why = sqlite3_mprintf("%s not used: %s: %s", c->path, p, strerror(errno));
      return 0;
    }
    if (st.st_uid != so_st.st_uid && st.st_uid != 0) {
      *why = sqlite3_mprintf("%s not used: %s belongs to user %u, not to the owner of "
                             "bertfill.so (%u) or root",
                             c->path, p, (unsigned)st.st_uid, (unsigned)so_st.st_uid);
      return 0;
    }
    if ((st.st_mode & S_IWOTH) || ((st.st_mode & S_IWGRP) && !group_of_owner_alone(&st))) {
      *why = sqlite3_mprintf("%s not used: %s is writable by %s", c->path, p,
                             st.st_mode & S_IWOTH ? "every user" : "its group");
      return 0;
    }
    if (!keep) return 1;
    p[i] = keep;
  }
}

char *bfx_default_model_paths(void) {
  candidate c[MAX_CANDIDATES];
  int n = default_candidates(c, MAX_CANDIDATES);
  char *s = sqlite3_mprintf("%s", "");
  for (int i = 0; i < n && s; i++) {
    char *t = sqlite3_mprintf("%s%s%s", s, i ? ", " : "", c[i].path);
    sqlite3_free(s);
    s = t;
  }
  return s;
}

static int has_config(const char *dir) {
  char p[PATH_MAX + 16];
  snprintf(p, sizeof p, "%.*s/config.json", PATH_MAX - 1, dir);
  return access(p, R_OK) == 0;
}

bf_precision bfx_default_precision(void) {
  static const char *const names[] = {"fp32", "int8", "bf16"};
  _Static_assert(BF_PRECISION_INT8 == 1 && BF_PRECISION_BF16 == 2, "names in bf_precision's order");
  return (bf_precision)bf_env_choice("BERTFILL_PRECISION", names, 3, BF_PRECISION_FP32);
}

/* The model named by the environment, or the default model. */
static bf_model *resolve_default(bf_precision precision, const char **source, char **err) {
  const char *env = getenv("BERTFILL_MODEL");
  *err = NULL;
  if (env && *env) {
    *source = "BERTFILL_MODEL";
    return registry_get(env, precision, " (from the environment variable BERTFILL_MODEL)",
                        HOWTO_ENV, err);
  }
  candidate cand[MAX_CANDIDATES];
  int n = default_candidates(cand, MAX_CANDIDATES);
  char *passed_over = NULL; /* the first model found but not trusted: why */
  for (int i = 0; i < n; i++) {
    char *why = NULL;
    if (!has_config(cand[i].path)) continue;
    if (!trusted_below(&cand[i], &why)) {
      if (passed_over) sqlite3_free(why);
      else passed_over = why;
      continue;
    }
    sqlite3_free(passed_over);
    *source = "default";
    return registry_get(cand[i].path, precision, "", HOWTO, err);
  }
  char *where = bfx_default_model_paths();
  *err = sqlite3_mprintf("bertfill: no model: the default model %s was not found "
                         "(looked in %s%s%s).  " HOWTO,
                         DEFAULT_MODEL_NAME, where && where[0] ? where : "no location known",
                         passed_over ? "; " : "", passed_over ? passed_over : "");
  sqlite3_free(where);
  sqlite3_free(passed_over);
  return NULL;
}

/* A registry message (sqlite3_malloc'ed; NULL: out of memory) into e. */
static void take_error(bfx_err *e, char *msg) {
  if (!msg) bfx_err_nomem(e);
  else bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_MODEL, "%s", msg);
  sqlite3_free(msg);
}

bf_model *bfx_model_get(const char *dir, bf_precision precision, bfx_err *e) {
  char *err = NULL;
  bf_model *m = registry_get(dir, precision, "", HOWTO, &err);
  if (!m) take_error(e, err);
  return m;
}

bf_model *bfx_model_get_default(bf_precision precision, const char **source, bfx_err *e) {
  char *err = NULL;
  bf_model *m = resolve_default(precision, source, &err);
  if (!m) take_error(e, err);
  return m;
}

void bfx_model_put(bf_model *m) {
  if (m) registry_put(m);
}

char *bfx_model_describe(bf_model *m) {
  const bf_config *cfg = bf_model_config(m);
  const char *dir = bf_model_dir(m);
  const char *base = dir ? strrchr(dir, '/') : NULL;
  base = base && base[1] ? base + 1 : (dir ? dir : "?");
  return sqlite3_mprintf("%s: %d layers, hidden %d, vocab %d, %s, %s", base, cfg->num_hidden_layers,
                         cfg->hidden_size, cfg->vocab_size, bf_model_dtype(m),
                         bf_precision_name(bf_model_precision(m)));
}
