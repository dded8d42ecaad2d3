/*
 * fuse.c — graph fusion: a graph-level func becomes a driver of clusters.
 *
 * Input: a `func` of whole-array tensor ops (ir/graph.h). Output: the same
 * func, its body rewritten to the driver form (ir/README.md, "Graphs"), and
 * one new kernel per cluster, "<f>.c<k>", in f's module. The rules:
 *
 * Roles. Every op of the graph is one of
 *   - a *node*, which computes: elementwise ops, convert, select, concat,
 *     reduce, dot, gather, scatter (and a view or a generator promoted
 *     below); nodes are grouped into clusters, each cluster one kernel;
 *   - a *call* of a kernel (or func) of the module: it stays a call, in the
 *     driver, and its results are buffers;
 *   - *virtual*: views (reshape, transpose, broadcast, slice) and generators
 *     (const, iota, sym). A virtual value is never written to memory: each
 *     cluster that reads it computes it from its roots (the params, call
 *     results and node results it reads through views), as ops of its
 *     kernel, or better:
 *       * a reshape of a buffer (a contiguous array: a param, a call result,
 *         another cluster's result) is a `reshape` in the driver, a view of
 *         that buffer, and the cluster takes it as a parameter of the
 *         reshaped type;
 *       * a slice of a buffer is the index pattern of the load that reads
 *         it (`load %x, %i {index=":s:"}`);
 *       * a transpose read by a dot is folded into the dot's contracting and
 *         batch dimensions, when the result keeps its order and the host's
 *         gemm takes the form (one contracting dim, at most one leading
 *         batch dim).
 *   A value the driver must hold (a graph result, a call's argument) that is
 *   virtual but not a reshape of a buffer promotes the view under its
 *   reshapes to a node: some cluster materialises it.
 *
 * Kernels. A cluster's kernel has one `in` parameter per buffer (or driver
 * view) it reads, in the order of first use, then one `out` parameter per
 * result needed outside the cluster (by another cluster, a call or the
 * graph's results), in program order. Arrays are `ref`s read by whole
 * loads and written by whole stores, each store right after the op
 * computing its value; rank-0 values (scalars) are scalar parameters in,
 * rank-0 refs out. Dims are the graph's: the cluster's shape symbols are
 * the graph's, bound by name. A cluster whose ops use a shape symbol that
 * no parameter carries (a sum over an iota) also takes a graph input that
 * does, unused.
 *
 * Legality first. Clusters never form a cycle: two clusters are merged only
 * when no path leaves one and enters the other through a third node, so
 * the driver orders clusters and calls topologically and every buffer is
 * written before it is read. Calls are never merged.
 *
 * Then the heuristic (TPK_FUSE_ALL). Nodes are visited in program order;
 * each tries to join the cluster of every node whose result it reads
 * (producers, in operand order). A merge is taken when the merged cluster
 * still tiles — lower/tile.c makes a grid of its kernel with every store
 * inside and no array computed outside the grid but loads, views,
 * generators and conversions — or when neither cluster tiled before (whole
 * clusters and scalar work join each other; a tiling cluster never becomes
 * whole). A cluster tile.c makes a loop of (a full reduction) counts as
 * whole here: a loop is not shared among threads, a grid is. That gives elementwise chains with their broadcasts, reductions
 * with their producers and consumers (softmax, norms: rows), a dot with its
 * epilogue and row-wise prologue (x @ W + b, layernorm then matmul), and
 * multi-output clusters when a producer's consumers all join it.
 * TPK_FUSE_NONE makes one cluster per node.
 *
 * Calls take their epilogues and prologues first (TPK_FUSE_ALL, "epilogues
 * of calls" below; lower/README.md): elementwise chains reading only one
 * of a call's results (beside it constants and whole or broadcast buffers),
 * their intermediates read by nobody else, and conversions of an argument
 * only the call reads, join the call's cluster; the driver calls a clone of
 * the callee whose stores of that result store the chain's value (whose
 * loads convert). Where a stored element may not be final (a `+=` store,
 * the output read back, an `out zero`) the call stays as it is, and so do
 * the callees the caller says to keep (the runtime: the standard library's).
 *
 * The driver lists, in a topological order of clusters and calls (ties by
 * program order): `reshape` views where a cluster or call reads one, the
 * `call`s, and the `return`. A kernel the graph called that nothing calls
 * any more (its calls took epilogues) leaves the module.
 */
#include "lower/lower.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum Role { ROLE_VIRTUAL = 1, ROLE_NODE, ROLE_CALL } Role;

/* How a cluster's kernel tiles (lower/tile.c), cached at its root. */
typedef enum Class { CLASS_UNKNOWN, CLASS_TILED, CLASS_WHOLE } Class;

typedef struct Values {
  int n, cap;
  TpkValue **v;
} Values;

typedef struct Node {
  TpkOp *op;
  int pos;      /* index among the body's ops */
  int parent;   /* union-find: the cluster */
  Values roots; /* buffers and node results it reads, through virtual values */
  int *readers; /* nodes reading its results */
  int nreaders, capreaders;
  bool live;
  bool in_call; /* computed inside a called kernel (a member of its epilogue or prologue) */
  Class cls;    /* at a cluster's root */
  int stamp;
  int slot;     /* at a root: its place in the driver, -1 before */
  int next;     /* the cluster's members are a list from its root: the next, -1 at the end */
  int tail;     /* at a root: the list's last member */
} Node;

/* An epilogue of a call: elementwise nodes after it that read one of its
 * results y, and beside y only buffers (whole, or broadcast) and constants;
 * they become part of the called kernel, computed at each store of y on the
 * block stored (lower/README.md, "Epilogues and prologues of calls"). */
typedef struct Epilogue {
  int call;       /* the call's node */
  int result;     /* y is the call's result `result`, */
  int param;      /* the callee's parameter `param` */
  int *members;   /* the chain's nodes, in program order */
  int nmembers;
  TpkValue *exit; /* the one member result read outside: the kernel's output in y's place */
} Epilogue;

/* A prologue of a call: conversions of one of its `in` arguments u from a
 * buffer x, read by nothing but the call; the called kernel takes x and
 * converts each block it loads. */
typedef struct Prologue {
  int call;         /* the call's node */
  int operand;      /* u is the call's operand `operand`, */
  int param;        /* the callee's parameter `param` */
  int *members;     /* the converts, from x to u */
  int nmembers;
  TpkValue *source; /* x */
} Prologue;

typedef struct Fuser {
  TpkFunc *f;
  TpkModule *m;
  TpkFusePolicy policy;
  TpkFuseKeep keep; /* called kernels that take no epilogue (NULL: none) */
  void *keep_ctx;
  Epilogue *epilogues;
  int nepilogues, capepilogues;
  Prologue *prologues;
  int nprologues, capprologues;
  TpkError *err;
  TpkStatus status; /* the first failure */
  TpkArena arena;
  TpkOp **ops; /* the body, return excluded */
  int nops;
  TpkOp *ret;
  TpkPtrMap role;    /* op -> Role */
  TpkPtrMap node_of; /* op -> node index + 1 */
  Node *nodes;
  int nnodes;
  int *stack; /* path_between's, one slot per node */
  TpkPtrMap roots_of;  /* virtual value -> Values* */
  TpkPtrMap returned;  /* buffers the driver returns (roots of the results) */
  int stamp;
} Fuser;

static bool fuse_fail(Fuser *F, TpkStatus code, const char *fmt, const char *a, const char *b) {
  if (F->status == TPK_OK) F->status = tpk_error(F->err, code, fmt, a, b);
  return false;
}

static bool oom(Fuser *F) { return fuse_fail(F, TPK_ERR_NOMEM, "out of memory fusing '%s'%s", F->f->name, ""); }

/* v appended to s, even when s holds it (a call's arguments). */
static bool values_push(Fuser *F, Values *s, TpkValue *v) {
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 4;
    TpkValue **nv = tpk_arena_alloc(&F->arena, (size_t)cap * sizeof *nv);
    if (!nv) return oom(F);
    if (s->n) memcpy(nv, s->v, (size_t)s->n * sizeof *nv);
    s->v = nv;
    s->cap = cap;
  }
  s->v[s->n++] = v;
  return true;
}

/* v added to the set s. */
static bool values_add(Fuser *F, Values *s, TpkValue *v) {
  for (int i = 0; i < s->n; i++)
    if (s->v[i] == v) return true;
  return values_push(F, s, v);
}

static Role role_of(const Fuser *F, const TpkOp *op) {
  void *r;
  return op && tpk_ptrmap_get(&F->role, op, &r) ? (Role)(intptr_t)r : 0;
}

static int node_index(const Fuser *F, const TpkOp *op) {
  void *i;
  return op && tpk_ptrmap_get(&F->node_of, op, &i) ? (int)(intptr_t)i - 1 : -1;
}

static bool is_view(TpkOpcode opc) {
  return opc == TPK_OP_RESHAPE || opc == TPK_OP_TRANSPOSE || opc == TPK_OP_BROADCAST || opc == TPK_OP_SLICE;
}

static bool is_generator(TpkOpcode opc) { return opc == TPK_OP_CONST || opc == TPK_OP_IOTA || opc == TPK_OP_SYM; }

static bool computes(TpkOpcode opc) {
  switch (opc) {
  case TPK_OP_CONVERT: case TPK_OP_SELECT: case TPK_OP_CONCAT: case TPK_OP_REDUCE:
  case TPK_OP_DOT: case TPK_OP_GATHER: case TPK_OP_SCATTER:
    return true;
  default:
    return (tpk_op_info(opc)->flags & TPK_OPF_ELEMENTWISE) != 0;
  }
}

/* ---- roles, nodes, roots ------------------------------------------------------------- */

/* v through the virtual reshapes above its root. */
static TpkValue *strip_reshapes(const Fuser *F, TpkValue *v) {
  while (v->def && v->def->opcode == TPK_OP_RESHAPE && role_of(F, v->def) == ROLE_VIRTUAL) v = v->def->in[0];
  return v;
}

/* A value the driver must hold gets a buffer: under its reshapes, a param,
 * a call result or a node result; a view or generator there becomes a node. */
static bool promote(Fuser *F, TpkValue *v) {
  TpkValue *r = strip_reshapes(F, v);
  if (r->def && role_of(F, r->def) == ROLE_VIRTUAL && !tpk_ptrmap_put(&F->role, r->def, (void *)(intptr_t)ROLE_NODE))
    return oom(F);
  return true;
}

static bool classify(Fuser *F) {
  TpkFunc *f = F->f;
  for (TpkOp *op = f->body->first; op; op = op->next) F->nops += op->opcode != TPK_OP_RETURN;
  F->ops = tpk_arena_alloc(&F->arena, (size_t)(F->nops ? F->nops : 1) * sizeof *F->ops);
  if (!F->ops) return oom(F);
  int n = 0;
  for (TpkOp *op = f->body->first; op; op = op->next) {
    const char *name = tpk_op_info(op->opcode)->name;
    if (op->opcode == TPK_OP_RETURN) {
      if (op->next) return fuse_fail(F, TPK_ERR_INVALID, "graph '%s': 'return' is not the last op%s", f->name, "");
      F->ret = op;
      continue;
    }
    Role r = op->opcode == TPK_OP_CALL ? ROLE_CALL
             : computes(op->opcode) ? ROLE_NODE
             : is_view(op->opcode) || is_generator(op->opcode) ? ROLE_VIRTUAL
                                                                 : 0;
    if (!r || op->nregion) return fuse_fail(F, TPK_ERR_INVALID, "graph '%s': '%s' is not an op of a graph", f->name, name);
    for (int i = 0; i < op->nout; i++)
      if (op->out[i].type->kind != TPK_TYPE_TENSOR)
        return fuse_fail(F, TPK_ERR_INVALID, "graph '%s': '%s' gives a value that is not a tensor", f->name, name);
    if (!tpk_ptrmap_put(&F->role, op, (void *)(intptr_t)r)) return oom(F);
    F->ops[n++] = op;
  }
  if (!F->ret && f->nresults) return fuse_fail(F, TPK_ERR_INVALID, "graph '%s' has no 'return'%s", f->name, "");
  for (int i = 0; F->ret && i < F->ret->nin; i++)
    if (!promote(F, F->ret->in[i])) return false;
  for (int k = 0; k < F->nops; k++)
    if (F->ops[k]->opcode == TPK_OP_CALL)
      for (int i = 0; i < F->ops[k]->nin; i++)
        if (!promote(F, F->ops[k]->in[i])) return false;
  return true;
}

/* The buffers and node results v is computed from (v itself unless it is
 * virtual). */
static const Values *roots_of(Fuser *F, TpkValue *v) {
  void *p;
  if (tpk_ptrmap_get(&F->roots_of, v, &p)) return p;
  Values *s = tpk_arena_alloc(&F->arena, sizeof *s);
  if (!s) return oom(F), NULL;
  *s = (Values){0};
  if (!v->def || role_of(F, v->def) != ROLE_VIRTUAL) {
    if (!values_add(F, s, v)) return NULL;
  } else {
    for (int i = 0; i < v->def->nin; i++) {
      const Values *in = roots_of(F, v->def->in[i]);
      if (!in) return NULL;
      for (int k = 0; k < in->n; k++)
        if (!values_add(F, s, in->v[k])) return NULL;
    }
  }
  if (!tpk_ptrmap_put(&F->roots_of, v, s)) return oom(F), NULL;
  return s;
}

static bool add_reader(Fuser *F, Node *p, int reader) {
  for (int i = 0; i < p->nreaders; i++)
    if (p->readers[i] == reader) return true;
  if (p->nreaders == p->capreaders) {
    int cap = p->capreaders ? p->capreaders * 2 : 4;
    int *r = tpk_arena_alloc(&F->arena, (size_t)cap * sizeof *r);
    if (!r) return oom(F);
    if (p->nreaders) memcpy(r, p->readers, (size_t)p->nreaders * sizeof *r);
    p->readers = r;
    p->capreaders = cap;
  }
  p->readers[p->nreaders++] = reader;
  return true;
}

static int producer(const Fuser *F, const TpkValue *v) { return v->def ? node_index(F, v->def) : -1; }

static bool make_nodes(Fuser *F) {
  for (int k = 0; k < F->nops; k++) F->nnodes += role_of(F, F->ops[k]) != ROLE_VIRTUAL;
  F->nodes = tpk_arena_alloc(&F->arena, (size_t)(F->nnodes ? F->nnodes : 1) * sizeof *F->nodes);
  F->stack = tpk_arena_alloc(&F->arena, (size_t)(F->nnodes ? F->nnodes : 1) * sizeof *F->stack);
  if (!F->nodes || !F->stack) return oom(F);
  int n = 0;
  for (int k = 0; k < F->nops; k++) {
    TpkOp *op = F->ops[k];
    if (role_of(F, op) == ROLE_VIRTUAL) continue;
    F->nodes[n] = (Node){.op = op, .pos = k, .parent = n, .slot = -1, .next = -1, .tail = n};
    if (!tpk_ptrmap_put(&F->node_of, op, (void *)(intptr_t)(n + 1))) return oom(F);
    for (int i = 0; i < op->nin; i++) {
      const Values *r = roots_of(F, op->in[i]);
      if (!r) return false;
      for (int j = 0; j < r->n; j++)
        if (!values_add(F, &F->nodes[n].roots, r->v[j])) return false;
    }
    n++;
  }
  for (int i = 0; i < F->nnodes; i++)
    for (int j = 0; j < F->nodes[i].roots.n; j++) {
      int p = producer(F, F->nodes[i].roots.v[j]);
      if (p >= 0 && !add_reader(F, &F->nodes[p], i)) return false;
    }
  /* the driver returns buffers: the roots of the results under their reshapes */
  for (int i = 0; F->ret && i < F->ret->nin; i++)
    if (!tpk_ptrmap_put(&F->returned, strip_reshapes(F, F->ret->in[i]), NULL)) return oom(F);
  /* live: calls, what the graph returns, and what they read */
  for (int i = F->nnodes - 1; i >= 0; i--) {
    Node *nd = &F->nodes[i];
    nd->live = role_of(F, nd->op) == ROLE_CALL;
    for (int r = 0; r < nd->op->nout && !nd->live; r++) nd->live = tpk_ptrmap_get(&F->returned, &nd->op->out[r], NULL);
    for (int k = 0; k < nd->nreaders && !nd->live; k++) nd->live = F->nodes[nd->readers[k]].live;
  }
  return true;
}

/* ---- clusters ------------------------------------------------------------------------ */

static int find(Fuser *F, int i) {
  while (F->nodes[i].parent != i) {
    F->nodes[i].parent = F->nodes[F->nodes[i].parent].parent;
    i = F->nodes[i].parent;
  }
  return i;
}

static bool mergeable(Fuser *F, int i) {
  return F->nodes[i].live && !F->nodes[i].in_call && role_of(F, F->nodes[i].op) == ROLE_NODE;
}

/* Would merging clusters a and b close a cycle: a path from one to the
 * other through a third cluster? A cluster runs as one kernel, so the walk
 * goes from a cluster it reaches to the readers of all its members. */
static bool path_between(Fuser *F, int from, int to) {
  int stamp = ++F->stamp;
  int *stack = F->stack, top = 0;
  for (int m = from; m >= 0; m = F->nodes[m].next) stack[top++] = m;
  F->nodes[from].stamp = stamp;
  while (top) {
    int x = stack[--top];
    for (int k = 0; k < F->nodes[x].nreaders; k++) {
      int c = find(F, F->nodes[x].readers[k]);
      if (c == to && find(F, x) != from) return true;
      if (c == to || F->nodes[c].stamp == stamp) continue;
      F->nodes[c].stamp = stamp; /* a third cluster: all its members' readers next */
      for (int m = c; m >= 0; m = F->nodes[m].next) stack[top++] = m;
    }
  }
  return false;
}

/* ---- cluster kernels --------------------------------------------------------------------- */

/* Building one cluster's kernel, for the driver or (into a scratch module)
 * to see how a candidate merge would tile. */
typedef struct Kernel {
  Fuser *F;
  TpkModule *dst;
  int a, b;       /* the members: nodes whose cluster is a or b */
  Values inputs;  /* the values its `in` params have the types of: buffers, driver views */
  Values outputs; /* member results needed outside */
  TpkPtrMap seen; /* discovery: values visited */
  TpkFunc *k;
  TpkBuilder bld;
  TpkPtrMap memo;  /* graph value -> kernel value */
  TpkPtrMap param; /* input value -> kernel param */
  TpkPtrMap load;  /* input value -> its whole load */
} Kernel;

static bool member(Kernel *K, int node) {
  if (node < 0 || !mergeable(K->F, node)) return false;
  int c = find(K->F, node);
  return c == K->a || c == K->b;
}

static bool in_cluster(Kernel *K, const TpkValue *v) { return v->def && member(K, producer(K->F, v)); }

/* A buffer from the cluster's point of view: memory the driver holds. */
static bool buffer(Kernel *K, const TpkValue *v) {
  return !v->def || (role_of(K->F, v->def) != ROLE_VIRTUAL && !in_cluster(K, v));
}

/* A buffer, or a reshape of one (a view the driver makes). */
static bool viewable(Kernel *K, const TpkValue *v) {
  while (v->def && v->def->opcode == TPK_OP_RESHAPE && role_of(K->F, v->def) == ROLE_VIRTUAL) v = v->def->in[0];
  return buffer(K, v);
}

static bool discover(Kernel *K, TpkValue *v) {
  if (tpk_ptrmap_get(&K->seen, v, NULL)) return true;
  if (!tpk_ptrmap_put(&K->seen, v, NULL)) return oom(K->F);
  if (in_cluster(K, v)) return true;
  if (buffer(K, v)) return values_add(K->F, &K->inputs, v);
  TpkOp *op = v->def;
  if (op->opcode == TPK_OP_RESHAPE && viewable(K, v)) return values_add(K->F, &K->inputs, v);
  if (op->opcode == TPK_OP_SLICE && viewable(K, op->in[0])) {
    if (!values_add(K->F, &K->inputs, op->in[0])) return false;
    for (int i = 1; i < op->nin; i++)
      if (!discover(K, op->in[i])) return false;
    return true;
  }
  for (int i = 0; i < op->nin; i++)
    if (!discover(K, op->in[i])) return false;
  return true;
}

/* ---- symbols ---- */

typedef struct Syms {
  int n;
  const char *name[64];
} Syms;

static void syms_of_dim(Syms *s, const TpkDim *d) {
  if (d->kind == TPK_DIM_CONST) return;
  if (d->kind != TPK_DIM_SYM) {
    syms_of_dim(s, d->a);
    syms_of_dim(s, d->b);
    return;
  }
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->name[i], d->sym) == 0) return;
  if (s->n < 64) s->name[s->n++] = d->sym;
}

static void syms_of_type(Syms *s, const TpkType *t) {
  for (int i = 0; i < t->rank; i++) syms_of_dim(s, t->dims[i]);
}

static bool has_sym(const Syms *s, const char *name) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->name[i], name) == 0) return true;
  return false;
}

/* The symbols of the values a cluster computes, through its virtual
 * operands down to its inputs. */
static void used_syms(Kernel *K, const TpkValue *v, Syms *s, TpkPtrMap *done) {
  if (tpk_ptrmap_get(done, v, NULL) || !tpk_ptrmap_put(done, v, NULL)) return;
  syms_of_type(s, v->type);
  if (!v->def || buffer(K, v)) return;
  const char *sym = v->def->opcode == TPK_OP_SYM ? tpk_op_str(v->def, "name", "") : NULL;
  if (sym && !has_sym(s, sym) && s->n < 64) s->name[s->n++] = sym;
  if (in_cluster(K, v) || !viewable(K, v))
    for (int i = 0; i < v->def->nin; i++) used_syms(K, v->def->in[i], s, done);
}

/* The members' results needed outside: by a node of another cluster, or
 * returned. */
static bool find_outputs(Kernel *K) {
  Fuser *F = K->F;
  for (int i = 0; i < F->nnodes; i++) {
    if (!member(K, i)) continue;
    Node *nd = &F->nodes[i];
    for (int r = 0; r < nd->op->nout; r++) {
      TpkValue *v = &nd->op->out[r];
      bool out = tpk_ptrmap_get(&F->returned, v, NULL);
      for (int k = 0; k < nd->nreaders && !out; k++) {
        const Node *rd = &F->nodes[nd->readers[k]];
        if (member(K, nd->readers[k]) || !rd->live) continue;
        for (int j = 0; j < rd->roots.n && !out; j++) out = rd->roots.v[j] == v;
      }
      if (out && !values_add(F, &K->outputs, v)) return false;
    }
  }
  return true;
}

/* Inputs and outputs, then a graph input for each shape symbol the cluster
 * uses that they do not carry. */
static bool plan_kernel(Kernel *K) {
  Fuser *F = K->F;
  for (int i = 0; i < F->nnodes; i++)
    if (member(K, i))
      for (int j = 0; j < F->nodes[i].op->nin; j++)
        if (!discover(K, F->nodes[i].op->in[j])) return false;
  if (!find_outputs(K)) return false;
  Syms carried = {0}, used = {0};
  for (int i = 0; i < K->inputs.n; i++) syms_of_type(&carried, K->inputs.v[i]->type);
  for (int i = 0; i < K->outputs.n; i++) syms_of_type(&carried, K->outputs.v[i]->type);
  TpkPtrMap done = {0};
  for (int i = 0; i < F->nnodes; i++)
    if (member(K, i))
      for (int r = 0; r < F->nodes[i].op->nout; r++) used_syms(K, &F->nodes[i].op->out[r], &used, &done);
  tpk_ptrmap_free(&done);
  for (int s = 0; s < used.n; s++) {
    if (has_sym(&carried, used.name[s])) continue;
    TpkValue *carrier = NULL;
    for (int p = 0; p < F->f->nparams && !carrier; p++) {
      Syms ps = {0};
      syms_of_type(&ps, F->f->params[p].value->type);
      if (has_sym(&ps, used.name[s])) carrier = F->f->params[p].value;
    }
    if (!carrier)
      return fuse_fail(F, TPK_ERR_UNSUPPORTED, "graph '%s': shape symbol %s is in no input of the graph", F->f->name,
                       used.name[s]);
    if (!values_add(F, &K->inputs, carrier)) return false;
    syms_of_type(&carried, carrier->type);
  }
  return true;
}

/* ---- building ---- */

static const TpkDim *copy_dim(TpkModule *dst, const TpkDim *d) {
  switch (d->kind) {
  case TPK_DIM_CONST: return tpk_dim_const(dst, d->value);
  case TPK_DIM_SYM: return tpk_dim_sym(dst, tpk_module_intern(dst, d->sym, strlen(d->sym)));
  default: {
    const TpkDim *a = copy_dim(dst, d->a), *b = a ? copy_dim(dst, d->b) : NULL;
    return b ? tpk_dim_binary(dst, d->kind, a, b) : NULL;
  }
  }
}

/* t in module dst (re-interned when dst is not the graph's), as a tensor or
 * as a ref of that shape. */
static const TpkType *copy_type(Kernel *K, const TpkType *t, bool ref) {
  if (K->dst == K->F->m && !ref) return t;
  const TpkDim *dims[TPK_MAX_RANK];
  for (int i = 0; i < t->rank; i++)
    if (!(dims[i] = K->dst == K->F->m ? t->dims[i] : copy_dim(K->dst, t->dims[i]))) return NULL;
  return ref ? tpk_type_ref(K->dst, t->dtype, t->rank, dims, TPK_MEM_HBM) : tpk_type_tensor(K->dst, t->dtype, t->rank, dims);
}

static const char *hint(const TpkValue *v, char *buf, size_t n, const char *dflt, int i) {
  if (v->name && (v->name[0] < '0' || v->name[0] > '9')) return v->name;
  snprintf(buf, n, "%s%d", dflt, i);
  return buf;
}

static TpkOp *build(Kernel *K, TpkOpcode opc, int nin, TpkValue *const *in, const TpkType *out) {
  TpkOp *op = tpk_build(&K->bld, opc, nin, in, out ? 1 : 0, out ? &out : NULL);
  if (!op) oom(K->F);
  return op;
}

static bool copy_attrs(Kernel *K, TpkOp *to, const TpkOp *from) {
  return tpk_op_copy_attrs(K->dst, to, from) || oom(K->F);
}

static TpkIndexPattern whole(int rank) {
  TpkIndexPattern p = {.rank = rank};
  for (int i = 0; i < rank; i++) p.dim[i] = TPK_INDEX_ALL;
  return p;
}

static TpkValue *param_of(Kernel *K, TpkValue *input) {
  void *p;
  if (tpk_ptrmap_get(&K->param, input, &p)) return p;
  fuse_fail(K->F, TPK_ERR_INTERNAL, "internal error fusing '%s': an input was not planned%s", K->F->f->name, "");
  return NULL;
}

/* An input as a value: a scalar parameter itself, an array loaded whole. */
static TpkValue *input_value(Kernel *K, TpkValue *input) {
  void *p;
  if (tpk_ptrmap_get(&K->load, input, &p)) return p;
  TpkValue *prm = param_of(K, input);
  if (!prm) return NULL;
  if (input->type->rank == 0) return prm;
  TpkOp *ld = build(K, TPK_OP_LOAD, 1, &prm, copy_type(K, input->type, false));
  if (!ld) return NULL;
  TpkIndexPattern all = whole(input->type->rank);
  tpk_op_set_index(K->dst, ld, "index", &all);
  if (input->name && (input->name[0] < '0' || input->name[0] > '9')) {
    char name[128];
    snprintf(name, sizeof name, "%s.v", input->name);
    ld->out[0].name = tpk_module_intern(K->dst, name, strlen(name));
  }
  if (!tpk_ptrmap_put(&K->load, input, &ld->out[0])) return oom(K->F), NULL;
  return &ld->out[0];
}

static TpkValue *value(Kernel *K, TpkValue *v);

static TpkValue *clone(Kernel *K, TpkOp *op, int nin, TpkValue *const *in) {
  TpkOp *c = build(K, op->opcode, nin, in, copy_type(K, op->out[0].type, false));
  if (!c || !copy_attrs(K, c, op)) return NULL;
  c->loc = op->loc;
  c->out[0].name = op->out[0].name;
  return &c->out[0];
}

/* A dot whose operands are virtual transposes reads their inputs
 * (tpk_dot_through_transposes): the transposes never enter the cluster. */
static TpkValue *clone_dot(Kernel *K, TpkOp *op) {
  bool fold[2];
  for (int s = 0; s < 2; s++) {
    const TpkOp *t = op->in[s]->def;
    fold[s] = t && t->opcode == TPK_OP_TRANSPOSE && role_of(K->F, t) == ROLE_VIRTUAL;
  }
  TpkDotForm form;
  bool folded = tpk_dot_through_transposes(op, fold, &form);
  TpkValue *in[2] = {value(K, folded ? form.in[0] : op->in[0]), value(K, folded ? form.in[1] : op->in[1])};
  if (!in[0] || !in[1]) return NULL;
  TpkValue *r = clone(K, op, 2, in);
  if (r && folded) tpk_dot_set_dims(K->dst, r->def, &form);
  return r;
}

/* The kernel value of graph value v (a member's result is there already). */
static TpkValue *value(Kernel *K, TpkValue *v) {
  void *p;
  if (tpk_ptrmap_get(&K->memo, v, &p)) return p;
  TpkValue *r = NULL;
  TpkOp *op = v->def;
  if (buffer(K, v) || (op->opcode == TPK_OP_RESHAPE && viewable(K, v))) {
    r = input_value(K, v);
  } else if (in_cluster(K, v)) {
    fuse_fail(K->F, TPK_ERR_INTERNAL, "internal error fusing '%s': a value is read before it is computed%s",
              K->F->f->name, "");
  } else if (op->opcode == TPK_OP_SLICE && viewable(K, op->in[0])) { /* the load's index pattern */
    TpkValue *in[TPK_MAX_RANK + 1];
    in[0] = param_of(K, op->in[0]);
    bool ok = in[0] != NULL;
    for (int i = 1; i < op->nin && ok; i++) ok = (in[i] = value(K, op->in[i])) != NULL;
    TpkOp *ld = ok ? build(K, TPK_OP_LOAD, op->nin, in, copy_type(K, v->type, false)) : NULL;
    if (ld) {
      tpk_op_set_index(K->dst, ld, "index", tpk_op_index(op, "index"));
      ld->loc = op->loc;
      ld->out[0].name = v->name;
      r = &ld->out[0];
    }
  } else {
    TpkValue *in[64];
    bool ok = op->nin <= 64;
    for (int i = 0; i < op->nin && ok; i++) ok = (in[i] = value(K, op->in[i])) != NULL;
    if (ok) r = clone(K, op, op->nin, in);
  }
  if (r && !tpk_ptrmap_put(&K->memo, v, r)) return oom(K->F), NULL;
  return r;
}

/* A member: its op in the kernel, then the store of its result when the
 * cluster gives it out. */
static bool build_member(Kernel *K, TpkOp *op) {
  TpkValue *r;
  K->bld.loc = op->loc;
  if (op->opcode == TPK_OP_DOT && op->nin == 2) {
    r = clone_dot(K, op);
  } else {
    TpkValue *in[64];
    if (op->nin > 64) return fuse_fail(K->F, TPK_ERR_UNSUPPORTED, "graph '%s': an op with more than 64 operands%s", K->F->f->name, "");
    for (int i = 0; i < op->nin; i++)
      if (!(in[i] = value(K, op->in[i]))) return false;
    r = clone(K, op, op->nin, in);
  }
  if (!r || !tpk_ptrmap_put(&K->memo, &op->out[0], r)) return r ? oom(K->F) : false;
  for (int i = 0; i < K->outputs.n; i++) {
    if (K->outputs.v[i] != &op->out[0]) continue;
    TpkValue *in[2] = {K->k->params[K->inputs.n + i].value, r};
    TpkOp *st = build(K, TPK_OP_STORE, 2, in, NULL);
    if (!st) return false;
    TpkIndexPattern all = whole(op->out[0].type->rank);
    tpk_op_set_index(K->dst, st, "index", &all);
    tpk_op_set_store_mode(K->dst, st, TPK_STORE_SET);
  }
  return true;
}

/* Plan and build the kernel of clusters a and b (b may equal a) into dst. */
static TpkFunc *build_kernel(Kernel *K, const char *name) {
  Fuser *F = K->F;
  if (!plan_kernel(K)) return NULL;
  int n = K->inputs.n + K->outputs.n;
  const TpkType **types = malloc((size_t)(n ? n : 1) * sizeof *types);
  const char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
  TpkParamRole *roles = malloc((size_t)(n ? n : 1) * sizeof *roles);
  char (*buf)[64] = malloc((size_t)(n ? n : 1) * sizeof *buf);
  bool ok = types && names && roles && buf;
  for (int i = 0; i < n && ok; i++) {
    bool in = i < K->inputs.n;
    TpkValue *v = in ? K->inputs.v[i] : K->outputs.v[i - K->inputs.n];
    types[i] = copy_type(K, v->type, !in || v->type->rank > 0);
    names[i] = hint(v, buf[i], sizeof buf[i], in ? "in" : "out", in ? i : i - K->inputs.n);
    /* hints need not be unique (an op's two results, a builder's two sums): parameter names must */
    for (int j = 0, again = 0; j < i; j++)
      if (strcmp(names[j], names[i]) == 0) {
        char unique[sizeof buf[i]];
        snprintf(unique, sizeof unique, "%.40s.%d", hint(v, buf[i], sizeof buf[i], in ? "in" : "out", i), again++);
        memcpy(buf[i], unique, sizeof unique);
        names[i] = buf[i];
        j = -1;
      }
    roles[i] = in ? TPK_PARAM_IN : TPK_PARAM_OUT;
    ok = types[i] != NULL;
  }
  TpkFunc *k = ok ? tpk_func_new(K->dst, name, true, n, types, names, roles) : NULL;
  free(types);
  free(names);
  free(roles);
  free(buf);
  if (!k) return oom(F), NULL;
  K->k = k;
  K->bld = (TpkBuilder){.m = K->dst, .block = k->body};
  for (int i = 0; i < K->inputs.n; i++)
    if (!tpk_ptrmap_put(&K->param, K->inputs.v[i], k->params[i].value)) return oom(F), NULL;
  for (int i = 0; i < F->nnodes; i++)
    if (member(K, i) && !build_member(K, F->nodes[i].op)) return NULL;
  return k;
}

static void kernel_free(Kernel *K) {
  tpk_ptrmap_free(&K->seen);
  tpk_ptrmap_free(&K->memo);
  tpk_ptrmap_free(&K->param);
  tpk_ptrmap_free(&K->load);
}

/* ---- the heuristic: does a cluster tile? ----------------------------------------------- */

/* Tiled: every store in a grid, and outside it nothing computed on arrays
 * but loads, views, generators and conversions (scalars are cheap). */
static Class tiling(const TpkFunc *k) {
  bool grid = false;
  for (const TpkOp *op = k->body->first; op; op = op->next) {
    if (op->opcode == TPK_OP_GRID) {
      grid = true;
      continue;
    }
    if (op->opcode == TPK_OP_STORE) return CLASS_WHOLE;
    if (op->nout && op->out[0].type->kind == TPK_TYPE_TENSOR && op->out[0].type->rank > 0 && !is_view(op->opcode) &&
        !is_generator(op->opcode) && op->opcode != TPK_OP_LOAD && op->opcode != TPK_OP_CONVERT)
      return CLASS_WHOLE;
  }
  return grid ? CLASS_TILED : CLASS_WHOLE;
}

/* Does a dot in k's grid take a left operand computed outside the grid? The
 * gemm then packs all of it for every block (a right operand read whole is
 * packed once: host/emit_c.c). */
static bool inside(const TpkValue *v, const TpkOp *grid) {
  const TpkBlock *b = v->def ? v->def->parent : v->block;
  for (; b; b = b->parent ? b->parent->parent : NULL)
    if (b->parent == grid) return true;
  return false;
}

static bool repacks_left(const TpkFunc *k) {
  for (const TpkOp *g = k->body->first; g; g = g->next) {
    if (g->opcode != TPK_OP_GRID) continue;
    for (const TpkOp *op = g->regions[0]->first; op; op = op->next) {
      if (op->opcode != TPK_OP_DOT) continue;
      const TpkValue *lhs = op->in[0];
      while (inside(lhs, g) && lhs->def && is_view(lhs->def->opcode)) lhs = lhs->def->in[0];
      if (!inside(lhs, g)) return true;
    }
  }
  return false;
}

/* The class of the union of clusters a and b, from its kernel built into a
 * scratch module and tiled; *repacks (when not NULL) says whether a dot of
 * the tiled kernel packs a whole left operand for every block. */
static Class class_of_repacking(Fuser *F, int a, int b, bool *repacks) {
  if (a == b && F->nodes[a].cls != CLASS_UNKNOWN && !repacks) return F->nodes[a].cls;
  TpkModule *scratch = tpk_module_new(NULL);
  if (!scratch) return oom(F), CLASS_WHOLE;
  Kernel K = {.F = F, .dst = scratch, .a = a, .b = b};
  TpkFunc *k = build_kernel(&K, "candidate");
  kernel_free(&K);
  Class c = CLASS_WHOLE;
  if (k) {
    /* the host's tiles; the decision does not depend on the target much */
    TpkTarget t = {.name = "fuse", .vmem_bytes = (int64_t)128 << 20, .tile_bytes = (int64_t)256 << 10};
    TpkError err = {0};
    if (tpk_tile_whole_arrays(k, &t, &err) == TPK_OK) c = tiling(k);
    else oom(F);
    if (repacks && c == CLASS_TILED) *repacks = repacks_left(k);
  }
  tpk_module_free(scratch);
  if (a == b) F->nodes[a].cls = c;
  return c;
}

static Class class_of(Fuser *F, int a, int b) { return class_of_repacking(F, a, b, NULL); }

static void merge(Fuser *F, int a, int b, Class c) {
  F->nodes[b].parent = a;
  F->nodes[a].cls = c;
  F->nodes[F->nodes[a].tail].next = b;
  F->nodes[a].tail = F->nodes[b].tail;
}

static bool cluster_all(Fuser *F) {
  for (int i = 0; i < F->nnodes && F->status == TPK_OK; i++) {
    if (!mergeable(F, i)) continue;
    const Values *roots = &F->nodes[i].roots;
    for (int j = 0; j < roots->n && F->status == TPK_OK; j++) {
      int p = producer(F, roots->v[j]);
      if (p < 0 || !mergeable(F, p)) continue;
      int a = find(F, p), b = find(F, i);
      if (a == b || path_between(F, a, b) || path_between(F, b, a)) continue;
      Class ca = class_of(F, a, a), cb = class_of(F, b, b), both = class_of(F, a, b);
      if (both == CLASS_TILED || (ca != CLASS_TILED && cb != CLASS_TILED)) merge(F, a, b, both);
    }
  }
  /* siblings: clusters reading one array join when they tile together (one
   * pass over it instead of several), unless a dot's left operand is then
   * read whole by every block: a layer's dx = dy @ W and dW = dy^T @ x tile
   * together only by W's columns, and each block's gemms pack all of dy
   * again, where apart each tiles by its own rows */
  for (int i = 0; i < F->nnodes && F->status == TPK_OK; i++) {
    if (!mergeable(F, i)) continue;
    const Values *roots = &F->nodes[i].roots;
    for (int j = 0; j < roots->n && F->status == TPK_OK; j++) {
      if (roots->v[j]->type->rank == 0) continue;
      for (int k = 0; k < i && F->status == TPK_OK; k++) {
        if (!mergeable(F, k)) continue;
        bool reads = false;
        for (int r = 0; r < F->nodes[k].roots.n && !reads; r++) reads = F->nodes[k].roots.v[r] == roots->v[j];
        int a = find(F, k), b = find(F, i);
        if (!reads || a == b || path_between(F, a, b) || path_between(F, b, a)) continue;
        bool repacks = false;
        if (class_of(F, a, a) == CLASS_TILED && class_of(F, b, b) == CLASS_TILED &&
            class_of_repacking(F, a, b, &repacks) == CLASS_TILED && !repacks)
          merge(F, a, b, CLASS_TILED);
      }
    }
  }
  return F->status == TPK_OK;
}

/* ---- epilogues of calls ------------------------------------------------------------------ */

/* May y, the callee's parameter `param`, take an epilogue at its stores?
 * When it is an `out` the kernel only stores into (`set`): never read back
 * (a load, a DMA), never accumulated into (`+=`: the epilogue would apply
 * to partial sums), not zeroed at the start (elements no store writes
 * would keep 0, not epilogue(0)). Stores repeated with `set` are sound, the
 * last one wins and the epilogue is pure. */
static bool stores_only(const TpkFunc *k, int param) {
  const TpkParam *p = &k->params[param];
  if (p->role != TPK_PARAM_OUT || p->zero_init || p->value->type->kind != TPK_TYPE_REF || !p->value->uses) return false;
  for (const TpkUse *u = p->value->uses; u; u = u->next)
    if (u->user->opcode != TPK_OP_STORE || u->index != 0 || tpk_op_store_mode(u->user) != TPK_STORE_SET) return false;
  return true;
}

/* An op the called kernel can compute on the block it stores: one element
 * from the same element of its operands, of y's shape S. Not an integer
 * division: past a ragged edge the block holds padding (0). */
static bool epilogue_op(const TpkOp *op, const TpkType *S) {
  if (op->nout != 1 || op->nregion || op->nin > 3 || op->out[0].type->rank != S->rank) return false;
  for (int i = 0; i < S->rank; i++)
    if (op->out[0].type->dims[i] != S->dims[i]) return false;
  if ((op->opcode == TPK_OP_DIV || op->opcode == TPK_OP_REM || op->opcode == TPK_OP_CDIV) &&
      !tpk_dtype_is_float(op->in[1]->type->dtype))
    return false;
  return op->opcode == TPK_OP_CONVERT || op->opcode == TPK_OP_SELECT ||
         (tpk_op_info(op->opcode)->flags & TPK_OPF_ELEMENTWISE) != 0;
}

/* What an epilogue reads beside its chain, as operand o: o itself or what
 * o broadcasts (aligned to the trailing dims of y's shape S, each dim S's or
 * 1), which must be a constant or a buffer (or a driver view of one) that
 * the call's cluster does not compute. NULL for anything else: an iota or
 * a symbol, a transpose or a slice, another result of the same call. */
static TpkValue *side_source(Fuser *F, TpkValue *o, const TpkType *S, int call) {
  TpkValue *x = o;
  if (o->def && o->def->opcode == TPK_OP_BROADCAST && role_of(F, o->def) == ROLE_VIRTUAL) x = o->def->in[0];
  const TpkType *t = x->type;
  if (t->rank > S->rank) return NULL;
  for (int i = 0; i < t->rank; i++) {
    int64_t one;
    if (t->dims[i] != S->dims[i + S->rank - t->rank] && !(tpk_dim_is_const(t->dims[i], &one) && one == 1)) return NULL;
  }
  if (x->def && x->def->opcode == TPK_OP_CONST && role_of(F, x->def) == ROLE_VIRTUAL) return x;
  TpkValue *r = strip_reshapes(F, x);
  if (r->def && role_of(F, r->def) == ROLE_VIRTUAL) return NULL;
  int p = producer(F, r);
  return call >= 0 && p >= 0 && find(F, p) == find(F, call) ? NULL : x;
}

/* A use that does not count: by a node no result needs, or by a view or
 * generator nothing reads. */
static bool dead_use(const Fuser *F, const TpkOp *user) {
  int n = node_index(F, user);
  if (n >= 0) return !F->nodes[n].live;
  if (role_of(F, user) != ROLE_VIRTUAL) return false;
  for (int i = 0; i < user->nout; i++)
    if (user->out[i].uses) return false;
  return true;
}

/* The clusters as they are, to try merges and take them back. */
typedef struct Saved {
  int parent, next, tail;
  Class cls;
} Saved;

static Saved *save_clusters(Fuser *F) {
  Saved *s = malloc((size_t)(F->nnodes ? F->nnodes : 1) * sizeof *s);
  for (int i = 0; s && i < F->nnodes; i++)
    s[i] = (Saved){F->nodes[i].parent, F->nodes[i].next, F->nodes[i].tail, F->nodes[i].cls};
  return s;
}

static void restore_clusters(Fuser *F, const Saved *s) {
  for (int i = 0; i < F->nnodes; i++) {
    F->nodes[i].parent = s[i].parent;
    F->nodes[i].next = s[i].next;
    F->nodes[i].tail = s[i].tail;
    F->nodes[i].cls = s[i].cls;
  }
}

/* Node n joins the call's cluster if that closes no cycle. */
static bool join_call(Fuser *F, int call, int n) {
  int a = find(F, call);
  if (path_between(F, a, n) || path_between(F, n, a)) return false;
  merge(F, a, n, CLASS_TILED);
  return true;
}

/* The epilogue of y = the call's result `result` (the callee's parameter
 * `param`), if there is one. The chain grows in program order: a node joins
 * when it reads the chain and otherwise only side sources (side_source),
 * and the call's cluster stays acyclic with it. Then its exit: the latest
 * member e such that e and the members it is computed from (with y) are
 * read by none but each other: e alone is read outside, it is the kernel's
 * new output. false only when fusing failed (memory). */
static bool find_epilogue(Fuser *F, int call, int result, int param) {
  TpkValue *y = &F->nodes[call].op->out[result];
  const TpkType *S = y->type;
  Saved *saved = save_clusters(F);
  int *chain = malloc((size_t)(F->nnodes ? F->nnodes : 1) * sizeof *chain);
  char *mark = calloc((size_t)(F->nnodes ? F->nnodes : 1), 1);
  TpkPtrMap in_chain = {0}; /* y and the members' results */
  bool ok = saved && chain && mark && tpk_ptrmap_put(&in_chain, y, NULL);
  int n = 0;
  for (int i = call + 1; ok && i < F->nnodes; i++) {
    TpkOp *op = F->nodes[i].op;
    if (!mergeable(F, i) || !epilogue_op(op, S)) continue;
    bool reads = false, side = true;
    for (int j = 0; j < op->nin && side; j++) {
      if (tpk_ptrmap_get(&in_chain, op->in[j], NULL)) reads = true;
      else side = side_source(F, op->in[j], S, call) != NULL;
    }
    if (!reads || !side || !join_call(F, call, i)) continue;
    chain[n++] = i;
    ok = tpk_ptrmap_put(&in_chain, &op->out[0], NULL);
  }
  int chosen = -1;
  for (int e = n - 1; ok && e >= 0 && chosen < 0; e--) {
    memset(mark, 0, (size_t)F->nnodes);
    mark[chain[e]] = 1; /* e, and what it is computed from */
    for (int j = e; j >= 0; j--) {
      const TpkOp *op = F->nodes[chain[j]].op;
      for (int i = 0; mark[chain[j]] && i < op->nin; i++) {
        int p = producer(F, op->in[i]);
        if (p >= 0 && p != call && tpk_ptrmap_get(&in_chain, op->in[i], NULL)) mark[p] = 1;
      }
    }
    bool closed = true;
    for (int j = -1; j < e && closed; j++) {
      const TpkValue *v = j < 0 ? y : &F->nodes[chain[j]].op->out[0];
      if (j >= 0 && !mark[chain[j]]) continue;
      for (const TpkUse *u = v->uses; u && closed; u = u->next) {
        int user = node_index(F, u->user);
        closed = (user >= 0 && mark[user]) || dead_use(F, u->user);
      }
    }
    if (closed) chosen = e;
  }
  if (ok) restore_clusters(F, saved);
  int members = 0;
  for (int j = 0; chosen >= 0 && j <= chosen; j++) members += mark[chain[j]];
  Epilogue *ep = NULL;
  if (ok && chosen >= 0 && F->nepilogues == F->capepilogues) {
    int cap = F->capepilogues ? F->capepilogues * 2 : 4;
    Epilogue *grown = tpk_arena_alloc(&F->arena, (size_t)cap * sizeof *grown);
    if (grown && F->nepilogues) memcpy(grown, F->epilogues, (size_t)F->nepilogues * sizeof *grown);
    if (grown) F->epilogues = grown, F->capepilogues = cap;
    ok = grown != NULL;
  }
  if (ok && chosen >= 0) {
    ep = &F->epilogues[F->nepilogues];
    *ep = (Epilogue){.call = call, .result = result, .param = param, .exit = &F->nodes[chain[chosen]].op->out[0]};
    ok = (ep->members = tpk_arena_alloc(&F->arena, (size_t)members * sizeof *ep->members)) != NULL;
  }
  /* the members join again: a part of an acyclic cluster is acyclic, but
   * the walk is cheap and a wrong cluster would be a wrong program */
  for (int j = 0; ok && ep && j <= chosen; j++) {
    if (!mark[chain[j]]) continue;
    if (!join_call(F, call, chain[j])) {
      restore_clusters(F, saved);
      ep = NULL;
      break;
    }
    ep->members[ep->nmembers++] = chain[j];
  }
  if (ok && ep) {
    for (int j = 0; j < ep->nmembers; j++) F->nodes[ep->members[j]].in_call = true;
    F->nepilogues++;
  }
  free(saved);
  free(chain);
  free(mark);
  tpk_ptrmap_free(&in_chain);
  return ok || oom(F);
}

/* May the callee's `in` parameter take a converted argument's source
 * instead? When the kernel only loads it (no DMA), each load without an
 * `other` or with 0 (a conversion keeps 0, so the padding past a ragged
 * edge is the same), or it is a scalar. */
static bool loads_only(const TpkFunc *k, int param) {
  const TpkParam *p = &k->params[param];
  if (p->role != TPK_PARAM_IN) return false;
  if (p->value->type->kind != TPK_TYPE_REF) return p->value->type->kind == TPK_TYPE_TENSOR;
  for (const TpkUse *u = p->value->uses; u; u = u->next) {
    const TpkAttr *other = tpk_op_attr(u->user, "other");
    if (u->user->opcode != TPK_OP_LOAD || u->index != 0 ||
        (other && (other->kind == TPK_ATTR_FLOAT ? other->f != 0 : other->i != 0)))
      return false;
  }
  return true;
}

/* The prologue of the call's operand `operand` (the callee's parameter
 * `param`): the conversions u is computed by, down to a buffer x, each
 * read by the next alone (u by the call alone). false only when fusing
 * failed (memory). */
static bool find_prologue(Fuser *F, int call, int operand, int param) {
  TpkValue *v = F->nodes[call].op->in[operand];
  int chain[64], n = 0;
  while (n < 64 && v->nuses == 1 && v->def && v->def->opcode == TPK_OP_CONVERT) {
    int c = node_index(F, v->def);
    if (c < 0 || !mergeable(F, c)) break;
    chain[n++] = c;
    v = v->def->in[0];
  }
  TpkValue *x = v;
  if (!n || (x->def && role_of(F, strip_reshapes(F, x)->def) == ROLE_VIRTUAL)) return true;
  int p = producer(F, strip_reshapes(F, x));
  if (p >= 0 && find(F, p) == find(F, call)) return true;
  Saved *saved = save_clusters(F);
  if (!saved) return oom(F);
  bool joined = true;
  for (int j = n - 1; j >= 0 && joined; j--) joined = join_call(F, call, chain[j]);
  if (!joined) restore_clusters(F, saved);
  free(saved);
  if (!joined) return true;
  if (F->nprologues == F->capprologues) {
    int cap = F->capprologues ? F->capprologues * 2 : 4;
    Prologue *grown = tpk_arena_alloc(&F->arena, (size_t)cap * sizeof *grown);
    if (!grown) return oom(F);
    if (F->nprologues) memcpy(grown, F->prologues, (size_t)F->nprologues * sizeof *grown);
    F->prologues = grown;
    F->capprologues = cap;
  }
  Prologue *pr = &F->prologues[F->nprologues];
  *pr = (Prologue){.call = call, .operand = operand, .param = param, .nmembers = n, .source = x};
  if (!(pr->members = tpk_arena_alloc(&F->arena, (size_t)n * sizeof *pr->members))) return oom(F);
  for (int j = 0; j < n; j++) {
    pr->members[j] = chain[n - 1 - j];
    F->nodes[chain[j]].in_call = true;
  }
  F->nprologues++;
  return true;
}

/* Each call's results, in order, take their epilogues, and its arguments
 * their prologues (TPK_FUSE_ALL), before the nodes cluster: a member is
 * computed in the called kernel and joins no other cluster. */
static bool fuse_calls(Fuser *F) {
  for (int c = 0; c < F->nnodes && F->status == TPK_OK; c++) {
    const TpkOp *op = F->nodes[c].op;
    if (role_of(F, op) != ROLE_CALL || !F->nodes[c].live) continue;
    const TpkFunc *k = tpk_module_find(F->m, tpk_op_str(op, "callee", ""));
    if (!k || !k->is_kernel || (F->keep && F->keep(F->keep_ctx, k))) continue;
    for (int i = 0, r = 0; i < k->nparams && r < op->nout; i++) {
      if (k->params[i].role == TPK_PARAM_IN) continue;
      if (stores_only(k, i) && !find_epilogue(F, c, r, i)) return false;
      r++;
    }
    for (int i = 0, a = 0; i < k->nparams && a < op->nin; i++) {
      if (k->params[i].role == TPK_PARAM_OUT) continue;
      if (loads_only(k, i) && !find_prologue(F, c, a, i)) return false;
      a++;
    }
  }
  return F->status == TPK_OK;
}

/* ---- the driver ------------------------------------------------------------------------ */

typedef struct Driver {
  Fuser *F;
  TpkBuilder bld;
  TpkPtrMap dv; /* graph value -> driver value */
} Driver;

/* The driver's value for a buffer or a reshape of one (one reshape from
 * the buffer, however many the graph had). */
static TpkValue *driver_value(Driver *D, TpkValue *v) {
  void *p;
  if (!v->def) return v;
  if (tpk_ptrmap_get(&D->dv, v, &p)) return p;
  Fuser *F = D->F;
  TpkValue *root = strip_reshapes(F, v);
  if (root == v) {
    fuse_fail(F, TPK_ERR_INTERNAL, "internal error fusing '%s': a buffer is read before it is written%s", F->f->name, "");
    return NULL;
  }
  TpkValue *r = driver_value(D, root);
  if (!r) return NULL;
  TpkOp *op = tpk_build(&D->bld, TPK_OP_RESHAPE, 1, &r, 1, &v->type);
  if (!op || !tpk_ptrmap_put(&D->dv, v, &op->out[0])) return oom(F), NULL;
  op->loc = v->def->loc;
  op->out[0].name = v->name;
  return &op->out[0];
}

static bool driver_call(Driver *D, TpkOp *like, const char *callee, const Values *args, int nres, TpkValue *const *res) {
  Fuser *F = D->F;
  TpkValue **in = malloc((size_t)(args->n ? args->n : 1) * sizeof *in);
  const TpkType **types = malloc((size_t)(nres ? nres : 1) * sizeof *types);
  bool ok = in && types;
  for (int i = 0; i < args->n && ok; i++) ok = (in[i] = driver_value(D, args->v[i])) != NULL;
  for (int i = 0; i < nres && ok; i++) types[i] = res[i]->type;
  TpkOp *call = ok ? tpk_build(&D->bld, TPK_OP_CALL, args->n, in, nres, types) : NULL;
  free(in);
  free(types);
  if (!call) return ok ? oom(F) : F->status == TPK_OK ? oom(F) : false;
  tpk_op_set_str(F->m, call, "callee", callee);
  if (like) call->loc = like->loc;
  for (int i = 0; i < nres; i++) {
    call->out[i].name = res[i]->name;
    if (!tpk_ptrmap_put(&D->dv, res[i], &call->out[i])) return oom(F);
  }
  return true;
}

/* A free kernel name "<f>.c<k>". */
static const char *cluster_name(Fuser *F, int *k, char *buf, size_t n) {
  do snprintf(buf, n, "%s.c%d", F->f->name, (*k)++);
  while (tpk_module_find(F->m, buf));
  return buf;
}

/* ---- a call with its epilogues: the callee cloned, its stores rewritten ---- */

typedef struct CallKernel {
  Fuser *F;
  TpkFunc *k;
  Values args;      /* the driver call's arguments: the call's, then a buffer per side parameter */
  TpkPtrMap params; /* side source -> its parameter of k */
} CallKernel;

/* The axis of a stored block that dim d of the ref is. */
static int stored_axis(const TpkIndexPattern *p, int d) {
  int k = 0;
  for (int i = 0; i < d; i++) k += p->dim[i] != TPK_INDEX_SCALAR;
  return k;
}

/* The parameter of k that side source x becomes: a scalar for a rank-0
 * value, else a ref whose dims are the callee's own, as y's parameter P has
 * them (x's dims are y's, aligned to the trailing ones, or 1). */
static TpkValue *side_param(CallKernel *C, TpkValue *x, const TpkType *S, const TpkType *P) {
  void *p;
  if (tpk_ptrmap_get(&C->params, x, &p)) return p;
  TpkModule *m = C->F->m;
  const TpkDim *dims[TPK_MAX_RANK];
  int off = S->rank - x->type->rank;
  for (int i = 0; i < x->type->rank; i++)
    dims[i] = x->type->dims[i] == S->dims[i + off] ? P->dims[i + off] : tpk_dim_const(m, 1);
  const TpkType *t = x->type->rank ? tpk_type_ref(m, x->type->dtype, x->type->rank, dims, TPK_MEM_HBM)
                                   : tpk_type_scalar(m, x->type->dtype);
  char buf[64], name[80];
  snprintf(name, sizeof name, "%s", hint(x, buf, sizeof buf, "in", C->k->nparams));
  for (int i = 0, again = 0; i < C->k->nparams; i++)
    if (strcmp(C->k->params[i].name ? C->k->params[i].name : "", name) == 0) {
      snprintf(name, sizeof name, "%.40s.%d", hint(x, buf, sizeof buf, "in", C->k->nparams), again++);
      i = -1;
    }
  TpkValue *v = t ? tpk_func_add_param(m, C->k, t, name, TPK_PARAM_IN) : NULL;
  if (!v || !values_push(C->F, &C->args, x) || !tpk_ptrmap_put(&C->params, x, v)) return oom(C->F), NULL;
  return v;
}

/* Side operand o of an epilogue, at store st of block `v` (y's shape S,
 * parameter type P): a constant of the block's shape, or its source loaded
 * with the store's index pattern (a dim x stretches is read whole, or at 0
 * where the store takes one element) and broadcast to the block. */
static TpkValue *side_value(CallKernel *C, TpkBuilder *b, const TpkOp *st, TpkValue *o, const TpkType *S, const TpkType *P) {
  Fuser *F = C->F;
  TpkValue *x = side_source(F, o, S, -1);
  const TpkType *v = st->in[st->nin - 1]->type;
  const TpkType *block = tpk_type_tensor(F->m, x->type->dtype, v->rank, v->dims);
  if (x->def && x->def->opcode == TPK_OP_CONST && role_of(F, x->def) == ROLE_VIRTUAL) {
    TpkOp *c = tpk_build(b, TPK_OP_CONST, 0, NULL, 1, &block);
    return c && tpk_op_copy_attrs(F->m, c, x->def) ? &c->out[0] : (oom(F), NULL);
  }
  TpkValue *r = side_param(C, x, S, P);
  if (r && x->type->rank > 0) {
    const TpkIndexPattern *sp = tpk_op_index(st, "index");
    TpkValue *operand[TPK_MAX_RANK], *in[TPK_MAX_RANK + 1], *zero = NULL;
    for (int d = 0, k = 1; d < sp->rank; d++) operand[d] = sp->dim[d] == TPK_INDEX_ALL ? NULL : st->in[k++];
    TpkIndexPattern lp = {.rank = x->type->rank};
    const TpkDim *dims[TPK_MAX_RANK];
    int nin = 0, rank = 0, off = S->rank - x->type->rank;
    in[nin++] = r;
    for (int i = 0; i < x->type->rank; i++) {
      int d = i + off;
      if (x->type->dims[i] == S->dims[d]) { /* the store's entry */
        lp.dim[i] = sp->dim[d];
        if (operand[d]) in[nin++] = operand[d];
        if (sp->dim[d] != TPK_INDEX_SCALAR) dims[rank++] = v->dims[stored_axis(sp, d)];
      } else if (sp->dim[d] == TPK_INDEX_SCALAR) { /* stretched where the store takes one element */
        if (!zero && !(zero = tpk_build_const_int(b, tpk_type_scalar(F->m, TPK_I32), 0))) return oom(F), NULL;
        lp.dim[i] = TPK_INDEX_SCALAR;
        in[nin++] = zero;
      } else { /* stretched: its one element */
        lp.dim[i] = TPK_INDEX_ALL;
        dims[rank++] = tpk_dim_const(F->m, 1);
      }
    }
    const TpkType *lt = tpk_type_tensor(F->m, x->type->dtype, rank, dims);
    TpkOp *ld = lt ? tpk_build(b, TPK_OP_LOAD, nin, in, 1, &lt) : NULL;
    if (!ld) return oom(F), NULL;
    tpk_op_set_index(F->m, ld, "index", &lp);
    if (x->name && (x->name[0] < '0' || x->name[0] > '9')) {
      char name[128];
      snprintf(name, sizeof name, "%s.v", x->name);
      ld->out[0].name = tpk_module_intern(F->m, name, strlen(name));
    }
    r = &ld->out[0];
  }
  if (r && r->type != block) {
    TpkOp *bc = tpk_build(b, TPK_OP_BROADCAST, 1, &r, 1, &block);
    r = bc ? &bc->out[0] : (oom(F), NULL);
  }
  return r;
}

/* Epilogue e in k: y's parameter takes the exit's dtype, and each store
 * `y[idx] = v` becomes `y[idx] = epilogue(v, side operands at idx)`. */
static bool fuse_epilogue(CallKernel *C, const Epilogue *e) {
  Fuser *F = C->F;
  TpkValue *y = &F->nodes[e->call].op->out[e->result], *P = C->k->params[e->param].value;
  const TpkType *S = y->type, *pt = P->type;
  P->type = tpk_type_ref(F->m, e->exit->type->dtype, pt->rank, pt->dims, pt->space);
  int nstores = P->nuses;
  TpkOp **stores = malloc((size_t)(nstores ? nstores : 1) * sizeof *stores);
  if (!stores || !P->type) return free(stores), oom(F);
  int n = 0;
  for (const TpkUse *u = P->uses; u; u = u->next) stores[n++] = u->user;
  bool ok = true;
  for (int s = 0; s < nstores && ok; s++) {
    TpkOp *st = stores[s];
    TpkBuilder b = {.m = F->m, .block = st->parent, .loc = st->loc, .before = st};
    TpkPtrMap memo = {0}; /* chain value -> its block */
    TpkValue *v = st->in[st->nin - 1];
    ok = tpk_ptrmap_put(&memo, y, v) || oom(F);
    for (int j = 0; j < e->nmembers && ok; j++) {
      TpkOp *op = F->nodes[e->members[j]].op;
      TpkValue *in[3];
      void *p;
      for (int i = 0; i < op->nin && ok; i++)
        ok = (in[i] = tpk_ptrmap_get(&memo, op->in[i], &p) ? p : side_value(C, &b, st, op->in[i], S, pt)) != NULL;
      const TpkType *t = ok ? tpk_type_tensor(F->m, op->out[0].type->dtype, v->type->rank, v->type->dims) : NULL;
      TpkOp *c = t ? tpk_build(&b, op->opcode, op->nin, in, 1, &t) : NULL;
      if (ok && (!c || !tpk_op_copy_attrs(F->m, c, op) || !tpk_ptrmap_put(&memo, &op->out[0], &c->out[0]))) ok = oom(F);
      if (ok) c->out[0].name = op->out[0].name;
    }
    void *value;
    if (ok && tpk_ptrmap_get(&memo, e->exit, &value)) tpk_op_set_operand(st, st->nin - 1, value);
    tpk_ptrmap_free(&memo);
  }
  free(stores);
  return ok;
}

/* Prologue p in k: the parameter takes the source's dtype, and each block
 * loaded from it (or the scalar it is) is converted as the graph did. */
static bool fuse_prologue(CallKernel *C, const Prologue *p) {
  Fuser *F = C->F;
  TpkValue *A = C->k->params[p->param].value;
  const TpkType *at = A->type;
  A->type = at->kind == TPK_TYPE_REF ? tpk_type_ref(F->m, p->source->type->dtype, at->rank, at->dims, at->space)
                                     : tpk_type_scalar(F->m, p->source->type->dtype);
  int nuses = A->nuses;
  TpkUse *uses = malloc((size_t)(nuses ? nuses : 1) * sizeof *uses);
  if (!uses || !A->type) return free(uses), oom(F);
  int n = 0;
  for (const TpkUse *u = A->uses; u; u = u->next) uses[n++] = *u;
  bool ok = true;
  for (int i = 0; i < (at->kind == TPK_TYPE_REF ? nuses : 1) && ok; i++) {
    TpkOp *ld = at->kind == TPK_TYPE_REF ? uses[i].user : NULL; /* a scalar converts once, first */
    TpkBuilder b = {.m = F->m, .block = ld ? ld->parent : C->k->body, .before = ld ? ld : C->k->body->first};
    TpkValue *v = A;
    if (ld) {
      b.loc = ld->loc;
      const TpkType *t = ld->out[0].type, *lt = tpk_type_tensor(F->m, A->type->dtype, t->rank, t->dims);
      TpkOp *nl = lt ? tpk_build(&b, TPK_OP_LOAD, ld->nin, ld->in, 1, &lt) : NULL;
      if (!nl) return free(uses), oom(F);
      tpk_op_set_index(F->m, nl, "index", tpk_op_index(ld, "index")); /* no `other`: 0 is 0 in every dtype */
      nl->out[0].name = ld->out[0].name;
      v = &nl->out[0];
    }
    for (int j = 0; j < p->nmembers && ok; j++) {
      TpkOp *cv = F->nodes[p->members[j]].op;
      const TpkType *t = tpk_type_tensor(F->m, cv->out[0].type->dtype, v->type->rank, v->type->dims);
      TpkOp *c = t ? tpk_build(&b, TPK_OP_CONVERT, 1, &v, 1, &t) : NULL;
      if (!c) ok = oom(F);
      else c->loc = cv->loc, c->out[0].name = cv->out[0].name, v = &c->out[0];
    }
    if (!ok) break;
    if (ld) {
      tpk_func_replace_uses(C->k, &ld->out[0], v);
      tpk_op_erase(ld);
    } else {
      for (int u = 0; u < nuses; u++) tpk_op_set_operand(uses[u].user, uses[u].index, v);
    }
  }
  free(uses);
  return ok;
}

/* The call of node c with its epilogues and prologues: the callee cloned
 * into a new kernel, the epilogues computed at its stores, the prologues at
 * its loads, called in the call's place with the side buffers as more
 * arguments and the prologues' sources for the arguments they computed. */
static bool driver_fused_call(Driver *D, int c, int *kname) {
  Fuser *F = D->F;
  TpkOp *call = F->nodes[c].op;
  const TpkFunc *callee = tpk_module_find(F->m, tpk_op_str(call, "callee", ""));
  TpkError err = {0};
  CallKernel C = {.F = F, .k = callee ? tpk_func_clone(F->m, callee, NULL, NULL, &err) : NULL};
  if (!C.k) return fuse_fail(F, err.code ? err.code : TPK_ERR_NOMEM, "fusing '%s': %s", F->f->name, err.message);
  char name[256];
  cluster_name(F, kname, name, sizeof name);
  C.k->name = tpk_module_intern(F->m, name, strlen(name));
  C.k->backward = NULL; /* the callee's backward kernel is not this kernel's */
  TpkValue *res[256];
  bool ok = C.k->name && call->nout <= 256;
  for (int i = 0; i < call->nin && ok; i++) ok = values_push(F, &C.args, call->in[i]);
  for (int i = 0; i < call->nout && ok; i++) res[i] = &call->out[i];
  for (int i = 0; i < F->nepilogues && ok; i++)
    if (F->epilogues[i].call == c) {
      res[F->epilogues[i].result] = F->epilogues[i].exit;
      ok = fuse_epilogue(&C, &F->epilogues[i]);
    }
  for (int i = 0; i < F->nprologues && ok; i++)
    if (F->prologues[i].call == c) {
      C.args.v[F->prologues[i].operand] = F->prologues[i].source;
      ok = fuse_prologue(&C, &F->prologues[i]);
    }
  ok = ok && driver_call(D, call, C.k->name, &C.args, call->nout, res);
  tpk_ptrmap_free(&C.params);
  return ok || (F->status == TPK_OK ? oom(F) : false);
}

/* Kernels the graph called that nothing calls now (an epilogue fused into
 * a clone of each) leave the module: nothing compiles them. */
static void drop_fused_callees(Fuser *F) {
  for (int i = 0; i < F->nepilogues + F->nprologues; i++) {
    int call = i < F->nepilogues ? F->epilogues[i].call : F->prologues[i - F->nepilogues].call;
    TpkFunc *k = tpk_module_find(F->m, tpk_op_str(F->nodes[call].op, "callee", ""));
    bool called = false;
    for (int j = 0; k && j < F->m->nfuncs && !called; j++)
      for (const TpkOp *op = F->m->funcs[j]->body->first; op && !called; op = op->next)
        called = op->opcode == TPK_OP_CALL && strcmp(tpk_op_str(op, "callee", ""), k->name) == 0;
    if (k && !called) tpk_module_remove(F->m, k);
  }
}

/* Clusters and calls in a topological order (ties by program order), each
 * built into the driver. */
static bool build_driver(Fuser *F) {
  int nroots = 0;
  int *roots = malloc((size_t)(F->nnodes ? F->nnodes : 1) * sizeof *roots);
  int *first = malloc((size_t)(F->nnodes ? F->nnodes : 1) * sizeof *first);
  if (!roots || !first) {
    free(roots);
    free(first);
    return oom(F);
  }
  for (int i = 0; i < F->nnodes; i++) {
    if (!F->nodes[i].live) continue;
    int r = find(F, i);
    if (r == i) roots[nroots++] = i, first[i] = F->nodes[i].pos;
  }
  Driver D = {.F = F, .bld = {.m = F->m, .block = F->f->body}};
  int kname = 0;
  bool ok = true;
  /* every cluster planned before anything is built: what can fail but memory
   * fails with the graph as it was */
  for (int c = 0; c < nroots && ok; c++) {
    if (role_of(F, F->nodes[roots[c]].op) == ROLE_CALL) continue;
    Kernel K = {.F = F, .dst = F->m, .a = roots[c], .b = roots[c]};
    ok = plan_kernel(&K);
    kernel_free(&K);
  }
  for (int placed = 0; placed < nroots && ok; placed++) {
    /* the ready cluster that comes first: every producer of its members placed */
    int pick = -1;
    for (int c = 0; c < nroots; c++) {
      int r = roots[c];
      if (F->nodes[r].slot >= 0 || (pick >= 0 && first[r] >= first[pick])) continue;
      bool ready = true;
      for (int i = 0; i < F->nnodes && ready; i++) {
        if (!F->nodes[i].live || find(F, i) != r) continue;
        for (int j = 0; j < F->nodes[i].roots.n && ready; j++) {
          int p = producer(F, F->nodes[i].roots.v[j]);
          ready = p < 0 || find(F, p) == r || F->nodes[find(F, p)].slot >= 0;
        }
      }
      if (ready) pick = r;
    }
    if (pick < 0) {
      ok = fuse_fail(F, TPK_ERR_INTERNAL, "internal error fusing '%s': the clusters form a cycle%s", F->f->name, "");
      break;
    }
    F->nodes[pick].slot = placed;
    TpkOp *op = F->nodes[pick].op;
    bool folds = false; /* epilogues or prologues */
    for (int i = 0; i < F->nepilogues && !folds; i++) folds = F->epilogues[i].call == pick;
    for (int i = 0; i < F->nprologues && !folds; i++) folds = F->prologues[i].call == pick;
    if (folds) {
      ok = driver_fused_call(&D, pick, &kname);
      continue;
    }
    if (role_of(F, op) == ROLE_CALL) {
      Values args = {.n = op->nin, .cap = op->nin, .v = (TpkValue **)op->in};
      TpkValue *res[256];
      for (int i = 0; i < op->nout && i < 256; i++) res[i] = &op->out[i];
      ok = op->nout <= 256 && driver_call(&D, op, tpk_op_str(op, "callee", ""), &args, op->nout, res);
      continue;
    }
    char name[256];
    Kernel K = {.F = F, .dst = F->m, .a = pick, .b = pick};
    TpkFunc *k = build_kernel(&K, cluster_name(F, &kname, name, sizeof name));
    ok = k && driver_call(&D, op, k->name, &K.inputs, K.outputs.n, K.outputs.v);
    kernel_free(&K);
  }
  free(roots);
  free(first);
  TpkValue **res = F->ret ? malloc((size_t)(F->ret->nin ? F->ret->nin : 1) * sizeof *res) : NULL;
  if (ok && F->ret && !res) ok = oom(F);
  for (int i = 0; ok && F->ret && i < F->ret->nin; i++) ok = (res[i] = driver_value(&D, F->ret->in[i])) != NULL;
  if (ok && F->ret) {
    TpkOp *ret = tpk_build(&D.bld, TPK_OP_RETURN, F->ret->nin, res, 0, NULL);
    if (!ret) ok = oom(F);
    else ret->loc = F->ret->loc;
  }
  free(res);
  tpk_ptrmap_free(&D.dv);
  return ok;
}

/* The graph's ops go, newest first (each one's results are unused then). */
static void erase_graph(Fuser *F) {
  TpkOp *last = F->ret ? F->ret : F->nops ? F->ops[F->nops - 1] : NULL;
  while (last) {
    TpkOp *prev = last->prev;
    tpk_op_erase(last);
    last = prev;
  }
}

TpkStatus tpk_fuse(TpkFunc *f, TpkFusePolicy policy, TpkError *err) { return tpk_fuse_keeping(f, policy, NULL, NULL, err); }

TpkStatus tpk_fuse_keeping(TpkFunc *f, TpkFusePolicy policy, TpkFuseKeep keep, void *ctx, TpkError *err) {
  if (!f || f->is_kernel)
    return tpk_error(err, TPK_ERR_INVALID, "tpk_fuse: '%s' is a kernel, not a graph func", f ? f->name : "(null)");
  Fuser F = {.f = f, .m = f->module, .policy = policy, .keep = keep, .keep_ctx = ctx, .err = err};
  tpk_arena_init(&F.arena, 0);
  for (int i = 0; i < f->nparams; i++)
    if (f->params[i].value->type->kind != TPK_TYPE_TENSOR) {
      tpk_arena_free(&F.arena);
      return tpk_error(err, TPK_ERR_INVALID, "graph '%s': parameter %d is not a tensor", f->name, i);
    }
  /* the driver's ops go after the graph's, which are erased at the end */
  if (classify(&F) && make_nodes(&F) && (policy == TPK_FUSE_NONE || (fuse_calls(&F) && cluster_all(&F))) &&
      build_driver(&F)) {
    erase_graph(&F);
    drop_fused_callees(&F);
  }
  tpk_ptrmap_free(&F.role);
  tpk_ptrmap_free(&F.node_of);
  tpk_ptrmap_free(&F.roots_of);
  tpk_ptrmap_free(&F.returned);
  tpk_arena_free(&F.arena);
  if (F.status != TPK_OK) return F.status;
  TpkError verr = {0};
  if (tpk_ir_verify(f->module, &verr) != TPK_OK)
    return tpk_error(err, TPK_ERR_INTERNAL, "internal error: fusing '%s' produced invalid IR: %s", f->name, verr.message);
  return TPK_OK;
}
