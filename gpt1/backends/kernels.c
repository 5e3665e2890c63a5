/* Fused CPU kernels for the training step (loaded by gpt1/backends/native.py; gpt1/backends/kernels.py holds
 * the torch reference of every function here; tests/unit/backends/test_kernels.py compares them).
 *
 * Eager PyTorch runs each elementwise op as its own pass over memory; in a bf16 training step
 * on 2 cores those passes (dropout masks from a per-element generator, tanh-GELU and its
 * backward, softmax rows) cost as much as a third of the GEMM time. Each kernel here is one
 * pass per direction, computes in fp32 and stores in the tensor's dtype (fp32 or bf16).
 *
 * Dropout masks come from a counter-based hash of (seed, element index): the mask is a pure
 * function of the seed, so backward regenerates it instead of storing it, any thread split
 * gives the same mask, and the torch reference reproduces it bit for bit.
 *
 * Built with -O3 -march=native (auto-vectorised) by gpt1/backends/native.py; no OpenMP (its
 * spinning threads would compete with torch's), a call splits rows over pthreads.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef uint16_t bf16;

/* ---- dtype access: kind 0 = float32, 1 = bfloat16 -------------------------------------- */

static inline float bf16_to_f32(bf16 b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline bf16 f32_to_bf16(float f) { /* round to nearest even, NaN stays NaN */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    return (f != f) ? (bf16)0x7FC0 : (bf16)r;
}

static inline float load(const void *p, int64_t i, int kind) {
    return kind ? bf16_to_f32(((const bf16 *)p)[i]) : ((const float *)p)[i];
}

static inline float load_rounded(float v, int kind) { /* v as the dtype will hold it */
    return kind ? bf16_to_f32(f32_to_bf16(v)) : v;
}

static inline void store(void *p, int64_t i, float v, int kind) {
    if (kind)
        ((bf16 *)p)[i] = f32_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

/* ---- counter-based random bits ----------------------------------------------------------- */

static inline uint32_t mix32(uint32_t x) { /* "lowbias32" integer hash (C. Wellons) */
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

static inline uint32_t rand32(uint32_t i, uint32_t s0, uint32_t s1) {
    return mix32(mix32(i + s0) ^ s1);
}

/* ---- vectorisable exp (Cephes expf polynomial, ~1 ulp on [-87, 88]) ------------------------ */

static inline float exp_f32(float x) {
    x = x < -87.0f ? -87.0f : x; /* NaN passes both clamps and propagates */
    x = x > 88.0f ? 88.0f : x;
    float n = rintf(x * 1.44269504088896341f);
    float r = fmaf(n, -0.693359375f, x);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p, r * r, r) + 1.0f;
    int32_t e = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &e, 4);
    return p * scale;
}

static inline float tanh_f32(float z) { return 1.0f - 2.0f / (exp_f32(2.0f * z) + 1.0f); }

/* buf[j] = exp(alpha x[off + j] - m) for j < n, m = max_j alpha x[off + j] (stored in *max);
 * returns sum_j buf[j]. The shared first two passes of every softmax here. */
static inline __attribute__((always_inline)) float exp_shifted(const void *x, int64_t off,
                                                              int64_t n, float alpha, float *buf,
                                                              const int kind, float *max) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < n; j++) {
        float v = alpha * load(x, off + j, kind);
        buf[j] = v;
        m = v > m ? v : m;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; j++) {
        float v = exp_f32(buf[j] - m);
        buf[j] = v;
        sum += v;
    }
    *max = m;
    return sum;
}

/* ---- threads --------------------------------------------------------------------------- */

typedef void (*range_fn)(const void *args, int64_t begin, int64_t end);

typedef struct {
    range_fn fn;
    const void *args;
    int64_t begin, end;
} task_t;

static void *run_task(void *p) {
    task_t *t = (task_t *)p;
    t->fn(t->args, t->begin, t->end);
    return NULL;
}

/* fn over [0, n) in `threads` contiguous pieces; the results never depend on the split */
static void parallel_for(range_fn fn, const void *args, int64_t n, int threads, int64_t grain) {
    if (threads > 64) threads = 64;
    int64_t most = grain > 0 ? (n + grain - 1) / grain : n;
    if (threads > most) threads = (int)most;
    if (threads <= 1) {
        if (n > 0) fn(args, 0, n);
        return;
    }
    pthread_t th[64];
    task_t tasks[64];
    int started[64] = {0};
    for (int i = 0; i < threads; i++)
        tasks[i] = (task_t){fn, args, n * i / threads, n * (i + 1) / threads};
    for (int i = 1; i < threads; i++)
        started[i] = pthread_create(&th[i], NULL, run_task, &tasks[i]) == 0;
    run_task(&tasks[0]);
    for (int i = 1; i < threads; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            run_task(&tasks[i]);
    }
}

/* ---- dropout: y = keep ? x * scale : 0, keep = rand32(i) >= threshold --------------------- */

typedef struct {
    const void *x;
    void *y;
    int kind;
    uint32_t s0, s1, threshold;
    float scale;
} dropout_args;

static void dropout_range(const void *p, int64_t b, int64_t e) {
    const dropout_args *a = (const dropout_args *)p;
    const uint32_t s0 = a->s0, s1 = a->s1, threshold = a->threshold;
    const float scale = a->scale; /* locals: a load through `a` under a condition blocks SIMD */
    if (a->kind) {
        const bf16 *x = (const bf16 *)a->x;
        bf16 *y = (bf16 *)a->y;
        for (int64_t i = b; i < e; i++) {
            float keep = rand32((uint32_t)i, s0, s1) >= threshold ? scale : 0.0f;
            y[i] = f32_to_bf16(keep * bf16_to_f32(x[i]));
        }
    } else {
        const float *x = (const float *)a->x;
        float *y = (float *)a->y;
        for (int64_t i = b; i < e; i++) {
            float keep = rand32((uint32_t)i, s0, s1) >= threshold ? scale : 0.0f;
            y[i] = keep * x[i];
        }
    }
}

void gpt1_dropout(const void *x, void *y, int64_t n, int kind, uint64_t seed, uint32_t threshold,
                  float scale, int threads) {
    dropout_args a = {x, y, kind, (uint32_t)seed, (uint32_t)(seed >> 32), threshold, scale};
    parallel_for(dropout_range, &a, n, threads, 1 << 16);
}

/* ---- tanh-GELU ----------------------------------------------------------------------------- */

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_C 0.044715f

typedef struct {
    const void *u, *g;
    void *out;
    int kind;
} gelu_args;

static void gelu_fwd_range(const void *p, int64_t b, int64_t e) {
    const gelu_args *a = (const gelu_args *)p;
    if (a->kind) {
        const bf16 *u = (const bf16 *)a->u;
        bf16 *y = (bf16 *)a->out;
        for (int64_t i = b; i < e; i++) {
            float x = bf16_to_f32(u[i]);
            float t = tanh_f32(GELU_K * fmaf(GELU_C * x, x * x, x));
            y[i] = f32_to_bf16(0.5f * x * (1.0f + t));
        }
    } else {
        const float *u = (const float *)a->u;
        float *y = (float *)a->out;
        for (int64_t i = b; i < e; i++) {
            float x = u[i];
            float t = tanh_f32(GELU_K * fmaf(GELU_C * x, x * x, x));
            y[i] = 0.5f * x * (1.0f + t);
        }
    }
}

static inline float gelu_grad(float x) {
    float t = tanh_f32(GELU_K * fmaf(GELU_C * x, x * x, x));
    float dinner = GELU_K * fmaf(3.0f * GELU_C * x, x, 1.0f);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner;
}

static void gelu_bwd_range(const void *p, int64_t b, int64_t e) {
    const gelu_args *a = (const gelu_args *)p;
    if (a->kind) {
        const bf16 *u = (const bf16 *)a->u, *g = (const bf16 *)a->g;
        bf16 *dx = (bf16 *)a->out;
        for (int64_t i = b; i < e; i++)
            dx[i] = f32_to_bf16(bf16_to_f32(g[i]) * gelu_grad(bf16_to_f32(u[i])));
    } else {
        const float *u = (const float *)a->u, *g = (const float *)a->g;
        float *dx = (float *)a->out;
        for (int64_t i = b; i < e; i++) dx[i] = g[i] * gelu_grad(u[i]);
    }
}

void gpt1_gelu_fwd(const void *u, void *y, int64_t n, int kind, int threads) {
    gelu_args a = {u, NULL, y, kind};
    parallel_for(gelu_fwd_range, &a, n, threads, 1 << 15);
}

void gpt1_gelu_bwd(const void *u, const void *g, void *dx, int64_t n, int kind, int threads) {
    gelu_args a = {u, g, dx, kind};
    parallel_for(gelu_bwd_range, &a, n, threads, 1 << 15);
}

/* ---- causal attention probabilities with dropout ------------------------------------------
 * Rows of (R, T) scores q.k (R = batch * heads * T); row r is query position t = r % T and
 * sees keys 0..t. Forward: P = softmax(alpha * s) over the visible keys, 0 beyond;
 * Pd = dropout(P) (element index r * T + j into the hash). Backward: from P and dPd = dL/dPd,
 * dS = alpha * P * (dP - sum(P * dP)), dP = dropout(dPd) with the same mask, written over dPd.
 */

typedef struct {
    const void *s;
    void *p, *pd;
    int64_t t_len;
    int kind;
    float alpha, scale;
    uint32_t s0, s1, threshold;
} attn_args;

/* Row bodies are inlined with kind (and drop) as constants, so each dtype gets its own
 * branch-free vector loops. */
static inline __attribute__((always_inline)) void attn_fwd_rows(const attn_args *a, int64_t b,
                                                                int64_t e, float *buf,
                                                                const int kind, const int drop) {
    const int64_t T = a->t_len;
    const uint32_t s0 = a->s0, s1 = a->s1, threshold = a->threshold;
    const float scale = a->scale, alpha = a->alpha;
    const void *S = a->s; /* locals: the compiler cannot prove buf does not alias *a */
    void *P = a->p, *PD = a->pd;
    for (int64_t r = b; r < e; r++) {
        const int64_t n = r % T + 1, off = r * T;
        float m;
        const float inv = 1.0f / exp_shifted(S, off, n, alpha, buf, kind, &m);
#pragma omp simd
        for (int64_t j = 0; j < n; j++) {
            float pj = load_rounded(buf[j] * inv, kind); /* the value P holds */
            store(P, off + j, pj, kind);
            if (drop) {
                uint32_t h = rand32((uint32_t)(off + j), s0, s1);
                store(PD, off + j, h >= threshold ? pj * scale : 0.0f, kind);
            }
        }
        const size_t width = kind ? sizeof(bf16) : sizeof(float), tail = (size_t)(T - n) * width;
        memset((char *)P + (size_t)(off + n) * width, 0, tail);
        if (drop) memset((char *)PD + (size_t)(off + n) * width, 0, tail);
    }
}

static void attn_fwd_range(const void *ap, int64_t b, int64_t e) {
    const attn_args *a = (const attn_args *)ap;
    float *buf = (float *)malloc(sizeof(float) * (size_t)a->t_len);
    if (!buf) abort();
    if (a->kind && a->pd)
        attn_fwd_rows(a, b, e, buf, 1, 1);
    else if (a->kind)
        attn_fwd_rows(a, b, e, buf, 1, 0);
    else if (a->pd)
        attn_fwd_rows(a, b, e, buf, 0, 1);
    else
        attn_fwd_rows(a, b, e, buf, 0, 0);
    free(buf);
}

static inline __attribute__((always_inline)) void attn_bwd_rows(const attn_args *a, int64_t b,
                                                                int64_t e, float *buf,
                                                                const int kind) {
    const int64_t T = a->t_len;
    const uint32_t s0 = a->s0, s1 = a->s1, threshold = a->threshold;
    const float scale = a->scale, alpha = a->alpha;
    const void *P = a->s;
    void *G = a->p; /* dL/dPd in, dL/ds out */
    for (int64_t r = b; r < e; r++) {
        const int64_t n = r % T + 1, off = r * T;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < n; j++) {
            uint32_t h = rand32((uint32_t)(off + j), s0, s1);
            float dp = h >= threshold ? scale * load(G, off + j, kind) : 0.0f;
            buf[j] = dp;
            dot += dp * load(P, off + j, kind);
        }
#pragma omp simd
        for (int64_t j = 0; j < n; j++)
            store(G, off + j, alpha * load(P, off + j, kind) * (buf[j] - dot), kind);
        const size_t width = kind ? sizeof(bf16) : sizeof(float);
        memset((char *)G + (size_t)(off + n) * width, 0, (size_t)(T - n) * width);
    }
}

static void attn_bwd_range(const void *ap, int64_t b, int64_t e) {
    const attn_args *a = (const attn_args *)ap;
    float *buf = (float *)malloc(sizeof(float) * (size_t)a->t_len);
    if (!buf) abort();
    if (a->kind)
        attn_bwd_rows(a, b, e, buf, 1);
    else
        attn_bwd_rows(a, b, e, buf, 0);
    free(buf);
}

void gpt1_attn_fwd(const void *s, void *p, void *pd, int64_t rows, int64_t t_len, int kind,
                   float alpha, uint64_t seed, uint32_t threshold, float scale, int threads) {
    attn_args a = {s, p, pd, t_len, kind, alpha, scale, (uint32_t)seed, (uint32_t)(seed >> 32),
                   threshold};
    parallel_for(attn_fwd_range, &a, rows, threads, 16);
}

void gpt1_attn_bwd(const void *p, void *dpd, int64_t rows, int64_t t_len, int kind, float alpha,
                   uint64_t seed, uint32_t threshold, float scale, int threads) {
    attn_args a = {p, dpd, NULL, t_len, kind, alpha, scale, (uint32_t)seed, (uint32_t)(seed >> 32),
                   threshold};
    parallel_for(attn_bwd_range, &a, rows, threads, 16);
}

/* ---- softmax rows in place, with their log-sum-exp (the fused output layer's loss) -------- */

typedef struct {
    void *x;
    float *lse;
    int64_t cols;
    int kind;
} softmax_args;

static inline __attribute__((always_inline)) void softmax_rows(const softmax_args *a, int64_t b,
                                                               int64_t e, float *buf,
                                                               const int kind) {
    const int64_t V = a->cols;
    void *X = a->x;
    float *lse = a->lse;
    for (int64_t r = b; r < e; r++) {
        const int64_t off = r * V;
        float m;
        const float sum = exp_shifted(X, off, V, 1.0f, buf, kind, &m), inv = 1.0f / sum;
#pragma omp simd
        for (int64_t j = 0; j < V; j++) store(X, off + j, buf[j] * inv, kind);
        lse[r] = m + logf(sum);
    }
}

static void softmax_range(const void *ap, int64_t b, int64_t e) {
    const softmax_args *a = (const softmax_args *)ap;
    float *buf = (float *)malloc(sizeof(float) * (size_t)a->cols);
    if (!buf) abort();
    if (a->kind)
        softmax_rows(a, b, e, buf, 1);
    else
        softmax_rows(a, b, e, buf, 0);
    free(buf);
}

void gpt1_softmax_rows(void *x, float *lse, int64_t rows, int64_t cols, int kind, int threads) {
    softmax_args a = {x, lse, cols, kind};
    parallel_for(softmax_range, &a, rows, threads, 4);
}

/* ---- residual add with dropout, then LayerNorm (a post-LN block's junction) ---------------
 * Forward per row: s = x + dropout(f), h = (s - mean) * rstd * gamma + beta, fp32 (x, h, s
 * fp32; f fp32 or bf16). Backward from dh: ds = rstd * (g - mean(g) - xhat * mean(g * xhat)),
 * g = dh * gamma; dx = ds, df = dropout(ds) with the same mask; dgamma, dbeta summed per block
 * of ROWS_PER_CHUNK rows, then over blocks in order (the same sums whatever the threads). */

#define ROWS_PER_CHUNK 64

typedef struct {
    const float *x, *gamma, *beta, *dh, *s_in;
    const void *f;
    float *s, *h, *mean, *rstd, *dx, *partial;
    void *df;
    int64_t rows, cols;
    int f_kind;
    float eps, scale;
    uint32_t s0, s1, threshold;
} addln_args;

static inline __attribute__((always_inline)) void addln_fwd_rows(const addln_args *a, int64_t b,
                                                                 int64_t e, float *buf,
                                                                 const int fk) {
    const int64_t C = a->cols;
    const uint32_t s0 = a->s0, s1 = a->s1, threshold = a->threshold;
    const float scale = a->scale, eps = a->eps;
    const float *X = a->x, *gamma = a->gamma, *beta = a->beta;
    const void *F = a->f;
    float *S = a->s, *H = a->h;
    for (int64_t r = b; r < e; r++) {
        const int64_t off = r * C;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < C; j++) {
            uint32_t hs = rand32((uint32_t)(off + j), s0, s1);
            float v = X[off + j] + (hs >= threshold ? scale * load(F, off + j, fk) : 0.0f);
            buf[j] = v;
            sum += v;
        }
        const float mu = sum / (float)C;
        float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
        for (int64_t j = 0; j < C; j++) sq += (buf[j] - mu) * (buf[j] - mu);
        const float rs = 1.0f / sqrtf(sq / (float)C + eps);
        if (S) memcpy(S + off, buf, sizeof(float) * (size_t)C);
#pragma omp simd
        for (int64_t j = 0; j < C; j++) H[off + j] = (buf[j] - mu) * rs * gamma[j] + beta[j];
        a->mean[r] = mu;
        a->rstd[r] = rs;
    }
}

static void addln_fwd_range(const void *ap, int64_t b, int64_t e) {
    const addln_args *a = (const addln_args *)ap;
    float *buf = (float *)malloc(sizeof(float) * (size_t)a->cols);
    if (!buf) abort();
    if (a->f_kind)
        addln_fwd_rows(a, b, e, buf, 1);
    else
        addln_fwd_rows(a, b, e, buf, 0);
    free(buf);
}

static inline __attribute__((always_inline)) void addln_bwd_chunks(const addln_args *a,
                                                                   int64_t cb, int64_t ce,
                                                                   const int fk) {
    const int64_t C = a->cols;
    const uint32_t s0 = a->s0, s1 = a->s1, threshold = a->threshold;
    const float scale = a->scale;
    const float *DH = a->dh, *S = a->s_in, *gamma = a->gamma;
    float *DX = a->dx;
    void *DF = a->df;
    for (int64_t c = cb; c < ce; c++) {
        float *dgamma = a->partial + c * 2 * C, *dbeta = dgamma + C;
        memset(dgamma, 0, sizeof(float) * 2 * (size_t)C);
        const int64_t r_end = (c + 1) * ROWS_PER_CHUNK < a->rows ? (c + 1) * ROWS_PER_CHUNK
                                                                 : a->rows;
        for (int64_t r = c * ROWS_PER_CHUNK; r < r_end; r++) {
            const int64_t off = r * C;
            const float mu = a->mean[r], rs = a->rstd[r];
            float m1 = 0.0f, m2 = 0.0f;
#pragma omp simd reduction(+ : m1, m2)
            for (int64_t j = 0; j < C; j++) {
                const float xhat = (S[off + j] - mu) * rs, d = DH[off + j], g = d * gamma[j];
                m1 += g;
                m2 += g * xhat;
                dgamma[j] += d * xhat;
                dbeta[j] += d;
            }
            m1 /= (float)C;
            m2 /= (float)C;
#pragma omp simd
            for (int64_t j = 0; j < C; j++) {
                const float xhat = (S[off + j] - mu) * rs;
                const float ds = rs * (DH[off + j] * gamma[j] - m1 - xhat * m2);
                DX[off + j] = ds;
                uint32_t hs = rand32((uint32_t)(off + j), s0, s1);
                store(DF, off + j, hs >= threshold ? ds * scale : 0.0f, fk);
            }
        }
    }
}

static void addln_bwd_range(const void *ap, int64_t b, int64_t e) {
    const addln_args *a = (const addln_args *)ap;
    if (a->f_kind)
        addln_bwd_chunks(a, b, e, 1);
    else
        addln_bwd_chunks(a, b, e, 0);
}

void gpt1_add_layer_norm_fwd(const float *x, const void *f, const float *gamma,
                             const float *beta, float *s, float *h, float *mean, float *rstd,
                             int64_t rows, int64_t cols, int f_kind, float eps, uint64_t seed,
                             uint32_t threshold, float scale, int threads) {
    addln_args a = {x, gamma, beta, NULL, NULL, f, s, h, mean, rstd, NULL, NULL, NULL, rows,
                    cols, f_kind, eps, scale, (uint32_t)seed, (uint32_t)(seed >> 32), threshold};
    parallel_for(addln_fwd_range, &a, rows, threads, 16);
}

int gpt1_add_layer_norm_bwd(const float *dh, const float *s, const float *gamma,
                            const float *mean, const float *rstd, float *dx, void *df,
                            float *dgamma, float *dbeta, int64_t rows, int64_t cols, int f_kind,
                            uint64_t seed, uint32_t threshold, float scale, int threads) {
    const int64_t chunks = (rows + ROWS_PER_CHUNK - 1) / ROWS_PER_CHUNK;
    float *partial = (float *)malloc(sizeof(float) * 2 * (size_t)(cols * (chunks ? chunks : 1)));
    if (!partial) return 1;
    addln_args a = {NULL, gamma, NULL, dh, s, NULL, NULL, NULL, (float *)mean, (float *)rstd,
                    dx, partial, df, rows, cols, f_kind, 0.0f, scale, (uint32_t)seed,
                    (uint32_t)(seed >> 32), threshold};
    parallel_for(addln_bwd_range, &a, chunks, threads, 1);
    for (int64_t j = 0; j < cols; j++) dgamma[j] = dbeta[j] = 0.0f;
    for (int64_t c = 0; c < chunks; c++) /* in order: the same sums for any thread count */
        for (int64_t j = 0; j < cols; j++) {
            dgamma[j] += partial[c * 2 * cols + j];
            dbeta[j] += partial[c * 2 * cols + cols + j];
        }
    free(partial);
    return 0;
}
