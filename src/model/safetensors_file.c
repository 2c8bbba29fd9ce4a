/* safetensors_file.c: safetensors model files (see safetensors_file.h). */
#include "model/safetensors_file.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/io.h"
#include "kernels/bf16.h"
#include "kernels/minifloat.h"
#include "kernels/vecmath.h"
#include "model/safetensors_moe.h"

#define MAX_HEADER_BYTES (100u << 20) /* the format's limit */
#define PREFIX "transformer."
#define PEFT_PREFIX "base_model.model.transformer." /* peft's names of a GPT2LMHeadModel's adapters */

typedef struct {
    const char *path;
    unsigned char *map;
    size_t size, data_start, data_size;
    json_t *header;
    char why[4608]; /* the first violation found, naming the file (and the tensor) */
} StFile;

/* Records why f is refused and returns false from the calling check. */
#define REFUSE(f, ...)                                                                                       \
    do {                                                                                                     \
        snprintf((f)->why, sizeof (f)->why, __VA_ARGS__);                                                    \
        return false;                                                                                        \
    } while (0)

/* Bytes per element of a safetensors dtype (0: unknown). */
static size_t dtype_size(const char *d) {
    static const struct { const char *name; size_t bytes; } known[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
        {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(d, known[i].name) == 0) return known[i].bytes;
    return 0;
}

/* ---- validation ---- */

typedef struct {
    const char *name;
    json_int_t begin, end;
} Extent;

/* By begin, then end: an empty tensor sorts before the one that starts where it is. */
static int by_begin(const void *a, const void *b) {
    const Extent *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* One tensor entry: dtype known, shape non-negative, offsets holding exactly its bytes. */
static bool check_entry(StFile *f, const char *name, json_t *e, Extent *x) {
    json_t *dtype = json_object_get(e, "dtype"), *shape = json_object_get(e, "shape");
    json_t *offsets = json_object_get(e, "data_offsets");
    if (!json_is_object(e) || !json_is_string(dtype) || !json_is_array(shape) || !json_is_array(offsets) ||
        json_array_size(offsets) != 2 || json_object_size(e) != 3)
        REFUSE(f, "%s: tensor %s must be {dtype, shape, data_offsets [begin, end)} and nothing else", f->path, name);
    size_t bytes = dtype_size(json_string_value(dtype));
    if (bytes == 0) REFUSE(f, "%s: tensor %s has an unknown dtype %s", f->path, name, json_string_value(dtype));
    for (size_t i = 0; i < json_array_size(shape); i++) {
        json_t *d = json_array_get(shape, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > (json_int_t)1 << 40)
            REFUSE(f, "%s: tensor %s has an invalid shape (dimension %zu)", f->path, name, i);
        bytes *= (size_t)json_integer_value(d);
        if (bytes > f->data_size) REFUSE(f, "%s: tensor %s is larger than the file's data area", f->path, name);
    }
    json_t *b = json_array_get(offsets, 0), *en = json_array_get(offsets, 1);
    if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
        json_integer_value(en) < json_integer_value(b) || (size_t)json_integer_value(en) > f->data_size)
        REFUSE(f, "%s: tensor %s has data_offsets outside the data area of %zu bytes", f->path, name, f->data_size);
    *x = (Extent){name, json_integer_value(b), json_integer_value(en)};
    if ((size_t)(x->end - x->begin) != bytes)
        REFUSE(f, "%s: tensor %s: data_offsets [%lld, %lld) hold %lld bytes; its dtype and shape need %zu", f->path,
               name, (long long)x->begin, (long long)x->end, (long long)(x->end - x->begin), bytes);
    return true;
}

/* The metadata: an object of strings. */
static bool check_metadata(StFile *f, json_t *e) {
    const char *key;
    json_t *v;
    if (!json_is_object(e)) REFUSE(f, "%s: __metadata__ must be an object of strings", f->path);
    json_object_foreach(e, key, v) if (!json_is_string(v)) REFUSE(f, "%s: __metadata__ value %s is not a string", f->path, key);
    return true;
}

/* The extents, sorted, tile [0, data_size). */
static bool check_tiling(StFile *f, Extent *ext, size_t k) {
    qsort(ext, k, sizeof(Extent), by_begin);
    json_int_t at = 0;
    for (size_t i = 0; i < k; i++) {
        if (ext[i].begin != at)
            REFUSE(f, "%s: tensor %s starts at byte %lld of the data area, not at %lld where the one before ends "
                   "(tensors must tile it with no holes or overlaps)", f->path, ext[i].name, (long long)ext[i].begin,
                   (long long)at);
        at = ext[i].end;
    }
    if ((size_t)at != f->data_size)
        REFUSE(f, "%s: %zu bytes after the last tensor (the data area is %zu bytes)", f->path,
               f->data_size - (size_t)at, f->data_size);
    return true;
}

/* Every entry valid, the tensors tiling the data area with no holes. */
static bool check_header(StFile *f) {
    size_t k = 0;
    Extent *ext = bs_malloc(sizeof(Extent) * (json_object_size(f->header) + 1));
    const char *name;
    json_t *e;
    bool ok = true;
    json_object_foreach(f->header, name, e) {
        ok = strcmp(name, "__metadata__") == 0 ? check_metadata(f, e) : check_entry(f, name, e, &ext[k++]);
        if (!ok) break;
    }
    ok = ok && check_tiling(f, ext, k);
    free(ext);
    return ok;
}

static bool st_try_open(StFile *f, const char *path) {
    memset(f, 0, sizeof *f); /* st_close is safe on whatever this leaves */
    f->path = path;
    int fd = open(path, O_RDONLY);
    if (fd < 0) REFUSE(f, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 8) {
        close(fd);
        REFUSE(f, "%s is not a safetensors file: %lld bytes, shorter than its header length", path,
               (long long)st.st_size);
    }
    f->size = (size_t)st.st_size;
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        REFUSE(f, "cannot map %s: %s", path, strerror(errno));
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | f->map[i];
    if (n > MAX_HEADER_BYTES)
        REFUSE(f, "%s: a header of %llu bytes, more than the format's 100 MB", path, (unsigned long long)n);
    if (8 + n > f->size)
        REFUSE(f, "%s is truncated: a header of %llu bytes in a file of %zu", path, (unsigned long long)n, f->size);
    json_error_t err;
    f->header = json_loadb((const char *)f->map + 8, (size_t)n, JSON_REJECT_DUPLICATES, &err);
    if (!f->header || !json_is_object(f->header))
        REFUSE(f, "%s: the header is not a JSON object: %s", path, f->header ? "another JSON value" : err.text);
    f->data_start = 8 + (size_t)n;
    f->data_size = f->size - f->data_start;
    return check_header(f);
}

static void st_close(StFile *f) {
    json_decref(f->header);
    if (f->map) munmap(f->map, f->size);
}

bool safetensors_is_file(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return false;
    unsigned char head[9];
    bool yes = fread(head, 1, sizeof head, fp) == sizeof head && head[8] == '{';
    fclose(fp);
    return yes;
}

/* ---- GPT-2's names ---- */

typedef struct {
    const char *name;  /* after "h.N." for per-layer kinds */
    bool conv1d;       /* stored (in, out): transposed */
} HfName;

static HfName hf_name(TensorKind k) {
    static const HfName names[TK_COUNT] = {
        [TK_WTE] = {"wte.weight", false}, [TK_WPE] = {"wpe.weight", false},
        [TK_LN1W] = {"ln_1.weight", false}, [TK_LN1B] = {"ln_1.bias", false},
        [TK_QKVW] = {"attn.c_attn.weight", true}, [TK_QKVB] = {"attn.c_attn.bias", false},
        [TK_ATTPROJW] = {"attn.c_proj.weight", true}, [TK_ATTPROJB] = {"attn.c_proj.bias", false},
        [TK_LN2W] = {"ln_2.weight", false}, [TK_LN2B] = {"ln_2.bias", false},
        [TK_FCW] = {"mlp.c_fc.weight", true}, [TK_FCB] = {"mlp.c_fc.bias", false},
        [TK_FCPROJW] = {"mlp.c_proj.weight", true}, [TK_FCPROJB] = {"mlp.c_proj.bias", false},
        [TK_LNFW] = {"ln_f.weight", false}, [TK_LNFB] = {"ln_f.bias", false},
        [TK_QKV_LORA_A] = {"attn.c_attn.lora_A.weight", false}, [TK_QKV_LORA_B] = {"attn.c_attn.lora_B.weight", false},
        [TK_ATTPROJ_LORA_A] = {"attn.c_proj.lora_A.weight", false},
        [TK_ATTPROJ_LORA_B] = {"attn.c_proj.lora_B.weight", false},
        [TK_FC_LORA_A] = {"mlp.c_fc.lora_A.weight", false}, [TK_FC_LORA_B] = {"mlp.c_fc.lora_B.weight", false},
        [TK_FCPROJ_LORA_A] = {"mlp.c_proj.lora_A.weight", false},
        [TK_FCPROJ_LORA_B] = {"mlp.c_proj.lora_B.weight", false}};
    return names[k];
}

/* The kinds a file holds: the model's, or (peft) the adapters'. */
typedef struct {
    int first, end;
    const char *prefix; /* written before every name */
} KindSet;
static const KindSet MODEL_KINDS = {0, TK_BASE_COUNT, PREFIX};
static const KindSet ADAPTER_KINDS = {TK_FIRST_ADAPTER_KIND, TK_LAST_ADAPTER_KIND + 1, PEFT_PREFIX};

static void full_name(TensorKind k, int layer, char *out, size_t n) {
    if (gpt_tensor_is_per_layer(k)) snprintf(out, n, "h.%d.%s", layer, hf_name(k).name);
    else snprintf(out, n, "%s", hf_name(k).name);
}

/* The file's shape of tensor k: (rows, cols), cols 0 for a vector. Linear
 * weights are (out, in) here, (in, out) in the file. */
static void file_shape(const GPTConfig *cfg, TensorKind k, size_t *rows, size_t *cols) {
    size_t C = (size_t)cfg->channels, n = gpt_tensor_numel(cfg, k);
    *cols = 0;
    if (gpt_tensor_is_adapter(k)) { /* A (r, in), B (out, r), as peft's Linear layers hold them */
        size_t r = (size_t)cfg->lora_rank, a = (k - TK_FIRST_ADAPTER_KIND) % 2 == 0;
        *rows = a ? r : n / r, *cols = a ? n / r : r;
    } else if (k == TK_WTE) *rows = (size_t)cfg->vocab_size, *cols = C;
    else if (k == TK_WPE) *rows = (size_t)cfg->max_seq_len, *cols = C;
    else if (k == TK_FCPROJW) *rows = n / C, *cols = C;       /* ours (C, 4C) */
    else if (hf_name(k).conv1d) *rows = C, *cols = n / C;     /* ours (out, C) */
    else *rows = n;
}

/* The entry for a GPT-2 name, with or without the prefix (NULL: absent;
 * check_names refuses a file that has both). */
static json_t *lookup(const StFile *f, const char *name) {
    char prefixed[256];
    snprintf(prefixed, sizeof prefixed, PREFIX "%s", name);
    json_t *a = json_object_get(f->header, prefixed);
    return a ? a : json_object_get(f->header, name);
}

static size_t dim(json_t *e, size_t i) { return (size_t)json_integer_value(json_array_get(json_object_get(e, "shape"), i)); }
static size_t ndim(json_t *e) { return json_array_size(json_object_get(e, "shape")); }

static float element(const unsigned char *p, const char *dtype) {
    if (strcmp(dtype, "F32") == 0) {
        float x;
        memcpy(&x, p, sizeof x);
        return x;
    }
    uint16_t h = (uint16_t)(p[0] | p[1] << 8);
    return strcmp(dtype, "BF16") == 0 ? bf16_to_float(h) : mini_to_float(h, &MINI_FP16);
}

/* Tensor `name`'s entry if it has the expected (rows, cols) shape and a dtype read here; NULL (why in f) if not. */
static json_t *expected_tensor(StFile *f, const char *name, size_t rows, size_t cols) {
    json_t *e = lookup(f, name);
    if (!e) {
        snprintf(f->why, sizeof f->why, "%s: tensor %s is missing", f->path, name);
        return NULL;
    }
    size_t want_dims = cols ? 2 : 1;
    if (ndim(e) != want_dims || dim(e, 0) != rows || (cols && dim(e, 1) != cols)) {
        snprintf(f->why, sizeof f->why, "%s: tensor %s has shape [%zu%s], expected [%zu%s%zu]", f->path, name,
                 ndim(e) ? dim(e, 0) : 0, ndim(e) > 1 ? ", ..." : "", rows, cols ? ", " : "", cols ? cols : (size_t)0);
        return NULL;
    }
    const char *dtype = json_string_value(json_object_get(e, "dtype"));
    if (strcmp(dtype, "F32") != 0 && strcmp(dtype, "BF16") != 0 && strcmp(dtype, "F16") != 0) {
        snprintf(f->why, sizeof f->why, "%s: tensor %s is %s; F32, BF16 and F16 are read", f->path, name, dtype);
        return NULL;
    }
    return e;
}

static const unsigned char *tensor_data(const StFile *f, json_t *e) {
    return f->map + f->data_start + (size_t)json_integer_value(json_array_get(json_object_get(e, "data_offsets"), 0));
}

static const char *tensor_dtype(json_t *e) { return json_string_value(json_object_get(e, "dtype")); }

/* Tensor `name` of the expected (rows, cols) shape into dst, (out, in) order. */
static bool read_tensor(StFile *f, const char *name, size_t rows, size_t cols, bool transpose, float *dst) {
    json_t *e = expected_tensor(f, name, rows, cols);
    if (!e) return false;
    const char *dtype = tensor_dtype(e);
    size_t bytes = dtype_size(dtype), c = cols ? cols : 1;
    const unsigned char *src = tensor_data(f, e);
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < c; j++)
            dst[transpose ? j * rows + i : i * c + j] = element(src + (i * c + j) * bytes, dtype);
    const size_t bad = floats_first_nonfinite(dst, rows * c); /* every reader comes through here */
    if (bad < rows * c) /* named by its place in the file (a transposed one's row and column swapped back) */
        REFUSE(f, "%s: tensor %s holds %s at element %zu (the file's weights are damaged)", f->path, name,
               isnan(dst[bad]) ? "a NaN" : "an infinity", transpose ? bad % rows * c + bad / rows : bad);
    return true;
}

/* Layers: the count of consecutive h.N.ln_1.weight from 0. */
static int count_layers(const StFile *f) {
    int n = 0;
    for (char name[64]; n < (1 << 20); n++) {
        snprintf(name, sizeof name, "h.%d.ln_1.weight", n);
        if (!lookup(f, name)) break;
    }
    return n;
}

/* A name (without the prefix) this engine reads or knowingly ignores: an MoE layer's experts, not a dense MLP. */
static bool known_name(const char *name, const GPTConfig *cfg) {
    const int layers = cfg->num_layers;
    int layer = -1;
    char rest[96] = "";
    if (strcmp(name, "lm_head.weight") == 0 || strcmp(name, "wte.weight") == 0 || strcmp(name, "wpe.weight") == 0 ||
        strcmp(name, "ln_f.weight") == 0 || strcmp(name, "ln_f.bias") == 0)
        return true;
    if (sscanf(name, "h.%d.%95s", &layer, rest) != 2 || layer < 0 || layer >= layers) return false;
    char canonical[112];
    snprintf(canonical, sizeof canonical, "h.%d.%s", layer, rest);
    if (strcmp(canonical, name) != 0) return false; /* "h.01.", "h.+1.": not GPT-2's */
    bool known = strcmp(rest, "attn.bias") == 0 || strcmp(rest, "attn.masked_bias") == 0;
    for (int k = TK_FIRST_LAYER_KIND; k <= TK_LAST_LAYER_KIND && !known; k++)
        known = strcmp(rest, hf_name((TensorKind)k).name) == 0 && gpt_layer_tensor_numel(cfg, (TensorKind)k, layer) > 0;
    return known || st_moe_known_name(cfg, layer, rest);
}

/* Every name is a tensor of cfg's model, an ignored mask buffer or the tied head, present once. */
static bool check_names(StFile *f, const GPTConfig *cfg) {
    const char *key;
    json_t *e;
    json_object_foreach(f->header, key, e) {
        if (strcmp(key, "__metadata__") == 0) continue;
        bool prefixed = strncmp(key, PREFIX, strlen(PREFIX)) == 0;
        const char *name = prefixed ? key + strlen(PREFIX) : key;
        if (!known_name(name, cfg))
            REFUSE(f, "%s: unexpected tensor %s (not a parameter of a %d-layer GPT-2%s)", f->path, key,
                   cfg->num_layers, gpt_is_moe(cfg) ? " with these experts" : "; MoE tensors need num_experts in "
                   "config.json");
        if (prefixed && json_object_get(f->header, name))
            REFUSE(f, "%s: both %s and %s are present", f->path, key, name);
    }
    return true;
}

/* ---- the declared shape: __metadata__ (written here) and config.json (save_pretrained's) ---- */

/* One declared size as a positive int: a JSON integer, or (metadata) a string of digits; 0 when absent. */
static bool declared_int(StFile *f, const char *source, json_t *v, const char *field, int *out) {
    *out = 0;
    if (!v || json_is_null(v)) return true;
    const char *text = json_string_value(v);
    char *end = NULL;
    long long n = json_is_integer(v) ? json_integer_value(v) : text ? strtoll(text, &end, 10) : -1;
    if ((text && (end == text || *end)) || n <= 0 || n > (1 << 30))
        REFUSE(f, "%s: %s is not a positive integer", source, field);
    *out = (int)n;
    return true;
}

/* Every size source declares agrees with the weights' shape c; its n_head into *heads (which must agree with one
 * declared before). */
static bool check_declared(StFile *f, const char *source, json_t *obj, const GPTConfig *c, int *heads) {
    const struct { const char *field; int weights; const char *from; } sizes[] = {
        {"n_layer", c->num_layers, "h.N layers"}, {"n_embd", c->channels, "wte.weight's columns"},
        {"n_positions", c->max_seq_len, "wpe.weight's rows"}, {"n_ctx", c->max_seq_len, "wpe.weight's rows"},
        {"vocab_size", c->vocab_size, "wte.weight's rows"}, {"n_inner", 4 * c->channels, "4 x n_embd, the MLP"}};
    int v;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (!declared_int(f, source, json_object_get(obj, sizes[i].field), sizes[i].field, &v)) return false;
        if (v && v != sizes[i].weights)
            REFUSE(f, "%s: %s %d disagrees with the weights' %d (%s)", source, sizes[i].field, v, sizes[i].weights,
                   sizes[i].from);
    }
    if (!declared_int(f, source, json_object_get(obj, "n_head"), "n_head", &v)) return false;
    if (v && *heads && v != *heads) REFUSE(f, "%s: n_head %d disagrees with __metadata__'s %d", source, v, *heads);
    if (v) *heads = v;
    return true;
}

/* The heads (not in the tensors) from the metadata and the config.json beside the file, each checked against the
 * weights' shape c; with neither, c->num_heads as the caller gave it (0: refused). */
static bool heads_of(StFile *f, GPTConfig *c) {
    int heads = 0;
    json_t *meta = json_object_get(f->header, "__metadata__");
    if (meta && !check_declared(f, f->path, meta, c, &heads)) return false;
    char dir[4096], config[4200];
    snprintf(dir, sizeof dir, "%s", f->path);
    snprintf(config, sizeof config, "%s/config.json", dirname(dir));
    if (bs_path_exists(config)) {
        json_error_t err;
        json_t *j = json_load_file(config, 0, &err);
        if (!j) REFUSE(f, "%s: not JSON: %s (line %d)", config, err.text, err.line);
        bool ok = json_is_object(j) && check_declared(f, config, j, c, &heads);
        json_decref(j);
        if (!ok && !f->why[0]) REFUSE(f, "%s: not a JSON object", config);
        if (!ok) return false;
    }
    if (!heads && c->num_heads <= 0)
        REFUSE(f, "%s: no n_head (the number of attention heads is not in the weights): neither its __metadata__ nor "
               "%s gives it", f->path, bs_path_exists(config) ? config : "a config.json beside it");
    if (heads) c->num_heads = heads;
    return true;
}

/* The MoE fields (safetensors_moe.h) from the metadata, else from the config.json beside the file. */
static bool moe_of(StFile *f, GPTConfig *cfg) {
    char dir[4096], config[4200];
    snprintf(dir, sizeof dir, "%s", f->path);
    snprintf(config, sizeof config, "%s/config.json", dirname(dir));
    json_t *meta = json_object_get(f->header, "__metadata__");
    json_t *j = bs_path_exists(config) ? json_load_file(config, 0, NULL) : NULL; /* heads_of refused bad JSON */
    bool ok = st_moe_read_fields(meta, j, json_object_get(meta, "num_experts") ? f->path : config, cfg, f->why,
                                 sizeof f->why);
    json_decref(j);
    return ok;
}

/* The shape from an open, valid file. */
static bool shape_of(StFile *f, GPTConfig *cfg) {
    json_t *wte = lookup(f, "wte.weight"), *wpe = lookup(f, "wpe.weight");
    if (!wte || !wpe || ndim(wte) != 2 || ndim(wpe) != 2)
        REFUSE(f, "%s: wte.weight and wpe.weight must be present and 2-dimensional", f->path);
    if (dim(wte, 0) > (1u << 30) || dim(wte, 1) > (1u << 16) || dim(wpe, 0) > (1u << 20))
        REFUSE(f, "%s: wte.weight [%zu, %zu] / wpe.weight [%zu, ...] are beyond this engine's limits", f->path,
               dim(wte, 0), dim(wte, 1), dim(wpe, 0));
    GPTConfig c = {.max_seq_len = (int)dim(wpe, 0), .vocab_size = (int)dim(wte, 0), .num_layers = count_layers(f),
                   .num_heads = cfg->num_heads, .channels = (int)dim(wte, 1)};
    if (!heads_of(f, &c) || !moe_of(f, &c) || !check_names(f, &c)) return false;
    char why[256];
    if (!gpt_config_check(&c, why, sizeof why)) REFUSE(f, "%s holds an invalid model shape: %s", f->path, why);
    *cfg = c;
    return true;
}

/* The reason as one printable line: names from the file may hold control characters. */
static void give_reason(const StFile *f, char *why, size_t why_size) {
    snprintf(why, why_size, "%s", f->why);
    for (char *c = why; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
}

bool safetensors_try_read_config(const char *path, GPTConfig *cfg, char *why, size_t why_size) {
    StFile f;
    bool ok = st_try_open(&f, path) && shape_of(&f, cfg);
    if (!ok) give_reason(&f, why, why_size);
    st_close(&f);
    return ok;
}

void safetensors_read_config(const char *path, GPTConfig *cfg) {
    char why[4608];
    if (!safetensors_try_read_config(path, cfg, why, sizeof why)) bs_die("%s", why);
}

/* Calls fn on every tensor in file order with its name and file shape; false at the first that fails. The
 * model's set ends with the MoE layers' tensors (safetensors_moe.h). */
static bool for_each_tensor(const GPTConfig *cfg, KindSet set, StPieceFn fn, void *ctx) {
    for (int k = set.first; k < set.end; k++) {
        TensorKind kind = (TensorKind)k;
        StPiece p = {.conv1d = hf_name(kind).conv1d};
        if (gpt_tensor_numel(cfg, kind) == 0) continue; /* an adapter the run does not have */
        file_shape(cfg, kind, &p.rows, &p.cols);
        for (int l = 0; l < (gpt_tensor_is_per_layer(kind) ? cfg->num_layers : 1); l++) {
            if (gpt_layer_tensor_numel(cfg, kind, l) == 0) continue; /* the dense MLP of an MoE layer */
            p.offset = gpt_tensor_offset(cfg, kind, l);
            full_name(kind, l, p.name, sizeof p.name);
            if (!fn(ctx, &p)) return false;
        }
    }
    return set.first != MODEL_KINDS.first || !gpt_is_moe(cfg) || st_moe_for_each(cfg, fn, ctx);
}

typedef struct {
    StFile *file;
    const GPTConfig *cfg;
    float *params;
    const char *prefix; /* before every name (peft's), or "" */
    float *bias;        /* MoE: the selection bias, (layers, E) */
} Reading;

static bool read_one(void *ctx, const StPiece *p) {
    Reading *r = ctx;
    char name[200];
    snprintf(name, sizeof name, "%s%s", r->prefix, p->name);
    if (p->state && !lookup(r->file, name)) return true; /* no selection bias: 0 */
    return read_tensor(r->file, name, p->rows, p->cols, p->conv1d, (p->state ? r->bias : r->params) + p->offset);
}

/* lm_head.weight, if present, must be wte (tied). */
static bool check_head(StFile *f, const GPT *model) {
    const GPTConfig *cfg = &model->cfg;
    if (!lookup(f, "lm_head.weight")) return true;
    size_t n = (size_t)cfg->vocab_size * cfg->channels;
    float *head = bs_malloc((n ? n : 1) * sizeof(float));
    bool ok = read_tensor(f, "lm_head.weight", (size_t)cfg->vocab_size, (size_t)cfg->channels, false, head);
    if (ok && memcmp(head, model->params + gpt_tensor_offset(cfg, TK_WTE, 0), n * sizeof(float)) != 0) {
        snprintf(f->why, sizeof f->why, "%s: lm_head.weight differs from wte.weight; this engine ties them", f->path);
        ok = false;
    }
    free(head);
    return ok;
}

bool safetensors_try_read_params(const char *path, GPT *model, char *why, size_t why_size) {
    const GPTConfig *cfg = &model->cfg;
    StFile f;
    bool ok = st_try_open(&f, path) && check_names(&f, cfg);
    if (ok && count_layers(&f) != cfg->num_layers) {
        snprintf(f.why, sizeof f.why, "%s holds %d layers, not %d", path, count_layers(&f), cfg->num_layers);
        ok = false;
    }
    if (ok) memset(model->params, 0, model->num_params * sizeof(float)); /* wte's padded rows stay 0 */
    if (ok && model->moe_bias) memset(model->moe_bias, 0, (size_t)cfg->num_layers * cfg->experts * sizeof(float));
    Reading r = {&f, cfg, model->params, "", model->moe_bias};
    ok = ok && for_each_tensor(cfg, MODEL_KINDS, read_one, &r) && check_head(&f, model);
    if (!ok) give_reason(&f, why, why_size);
    st_close(&f);
    return ok;
}

void safetensors_read_params(const char *path, GPT *model) {
    char why[4608];
    if (!safetensors_try_read_params(path, model, why, sizeof why)) bs_die("%s", why);
}

struct SafetensorsReader {
    StFile file;
    GPTConfig cfg;
};

static bool check_one(void *ctx, const StPiece *p) {
    return p->state || expected_tensor(ctx, p->name, p->rows, p->cols) != NULL; /* the selection bias: optional */
}

SafetensorsReader *safetensors_reader_open(const char *path, const GPTConfig *cfg) {
    SafetensorsReader *r = bs_calloc(1, sizeof *r);
    r->cfg = gpt_logical_config(cfg);
    r->cfg.part = GPT_PART_ALL;
    StFile *f = &r->file;
    bool ok = st_try_open(f, path) && check_names(f, &r->cfg);
    if (ok && count_layers(f) != cfg->num_layers) {
        snprintf(f->why, sizeof f->why, "%s holds %d layers, not %d", path, count_layers(f), cfg->num_layers);
        ok = false;
    }
    ok = ok && for_each_tensor(&r->cfg, MODEL_KINDS, check_one, f) &&
         (!lookup(f, "lm_head.weight") ||
          expected_tensor(f, "lm_head.weight", (size_t)cfg->vocab_size, (size_t)cfg->channels));
    if (!ok) bs_die("%s", f->why);
    return r;
}

/* Gives back the mapped pages of [p, p + n): read once, they need not stay resident. */
static void release(const unsigned char *p, size_t n) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), start = (uintptr_t)p & ~(page - 1);
    madvise((void *)start, (uintptr_t)p + n - start, MADV_DONTNEED);
}

void safetensors_reader_read(SafetensorsReader *r, TensorKind kind, int layer, size_t within, size_t count,
                             float *dst) {
    StFile *f = &r->file;
    char name[128]; /* lookup prefixes it within 160 */
    full_name(kind, layer, name, sizeof name);
    json_t *e = lookup(f, name), *head = kind == TK_WTE ? lookup(f, "lm_head.weight") : NULL;
    size_t rows, cols;
    file_shape(&r->cfg, kind, &rows, &cols);
    const size_t c = cols ? cols : 1, stored = rows * c, bytes = dtype_size(tensor_dtype(e));
    const bool transpose = hf_name(kind).conv1d;
    const unsigned char *src = tensor_data(f, e), *head_src = head ? tensor_data(f, head) : NULL;
    for (size_t i = 0; i < count; i++) {
        const size_t at = within + i, from = transpose ? (at % rows) * c + at / rows : at;
        dst[i] = at < stored ? element(src + from * bytes, tensor_dtype(e)) : 0.0f; /* wte's padded rows: 0 */
        if (head_src && at < stored) {
            const float tied = element(head_src + from * dtype_size(tensor_dtype(head)), tensor_dtype(head));
            if (memcmp(&tied, dst + i, sizeof tied) != 0)
                bs_die("%s: lm_head.weight differs from wte.weight; this engine ties them", f->path);
        }
    }
    release(src, stored * bytes);
    if (head_src) release(head_src, stored * dtype_size(tensor_dtype(head)));
    const size_t bad = floats_first_nonfinite(dst, count);
    if (bad < count) /* as read_tensor says it */
        bs_die("%s: tensor %s holds %s at element %zu (the file's weights are damaged)", f->path, name,
               isnan(dst[bad]) ? "a NaN" : "an infinity", within + bad);
}

void safetensors_reader_close(SafetensorsReader *r) {
    if (!r) return;
    st_close(&r->file);
    free(r);
}

/* Every name is one of cfg's adapters in peft's naming. */
static bool check_adapter_names(StFile *f, const GPTConfig *cfg) {
    const char *key;
    json_t *e;
    json_object_foreach(f->header, key, e) {
        if (strcmp(key, "__metadata__") == 0) continue;
        bool known = false;
        for (int k = TK_FIRST_ADAPTER_KIND; k <= TK_LAST_ADAPTER_KIND && !known; k++)
            for (int l = 0; l < cfg->num_layers && !known && gpt_tensor_numel(cfg, (TensorKind)k); l++) {
                char name[160] = PEFT_PREFIX;
                full_name((TensorKind)k, l, name + strlen(name), sizeof name - strlen(name));
                known = strcmp(key, name) == 0;
            }
        if (!known)
            REFUSE(f, "%s: unexpected tensor %s (not a LoRA adapter of rank %d on the adapted layers of a "
                      "%d-layer GPT-2)", f->path, key, cfg->lora_rank, cfg->num_layers);
    }
    return true;
}

void safetensors_read_adapters(const char *path, const GPTConfig *cfg, float *params) {
    StFile f;
    Reading r = {&f, cfg, params, PEFT_PREFIX, NULL};
    bool ok = st_try_open(&f, path) && check_adapter_names(&f, cfg) && for_each_tensor(cfg, ADAPTER_KINDS, read_one, &r);
    char why[4608];
    if (!ok) give_reason(&f, why, sizeof why);
    st_close(&f);
    if (!ok) bs_die("%s", why);
}

/* ---- writing ---- */

static json_t *metadata(const GPTConfig *cfg) {
    char v[5][16];
    snprintf(v[0], 16, "%d", cfg->num_layers), snprintf(v[1], 16, "%d", cfg->num_heads);
    snprintf(v[2], 16, "%d", cfg->channels), snprintf(v[3], 16, "%d", cfg->max_seq_len);
    snprintf(v[4], 16, "%d", cfg->vocab_size);
    json_t *meta = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "format", "pt", "n_layer", v[0], "n_head", v[1],
                             "n_embd", v[2], "n_positions", v[3], "vocab_size", v[4]);
    if (gpt_is_moe(cfg)) st_moe_describe(cfg, meta, true); /* a lone file states its experts too */
    return meta;
}

typedef struct {
    const GPTConfig *cfg;
    const float *params;
    const float *bias; /* MoE: the selection bias, (layers, E) */
    const char *prefix;
    json_t *header;
    size_t at;         /* the header pass: bytes of the data area so far */
    FILE *out;         /* the data pass */
    const char *path;
} Writing;

static bool describe_one(void *ctx, const StPiece *p) {
    Writing *w = ctx;
    char name[200];
    snprintf(name, sizeof name, "%s%s", w->prefix, p->name);
    const size_t rows = p->rows, cols = p->cols, bytes = rows * (cols ? cols : 1) * sizeof(float);
    json_t *shape = cols ? json_pack("[I, I]", (json_int_t)rows, (json_int_t)cols) : json_pack("[I]", (json_int_t)rows);
    json_object_set_new(w->header, name, json_pack("{s:s, s:o, s:[I, I]}", "dtype", "F32", "shape", shape,
                                                   "data_offsets", (json_int_t)w->at, (json_int_t)(w->at + bytes)));
    w->at += bytes;
    return true;
}

static bool write_one(void *ctx, const StPiece *p) {
    Writing *w = ctx;
    const float *src = (p->state ? w->bias : w->params) + p->offset;
    const size_t rows = p->rows, width = p->cols ? p->cols : 1, count = rows * width;
    float *buf = bs_malloc(count * sizeof(float));
    for (size_t i = 0; i < rows; i++) /* the file's (rows, cols); Conv1D weights are ours transposed */
        for (size_t j = 0; j < width; j++) buf[i * width + j] = p->conv1d ? src[j * rows + i] : src[i * width + j];
    bs_fwrite_all(buf, count * sizeof(float), w->out, w->path);
    free(buf);
    return true;
}

/* The tensors of `set` in cfg's layout from params (and an MoE model's selection bias), atomically. */
static void write_tensors(const char *path, const GPTConfig *cfg, const float *params, const float *bias, KindSet set,
                          json_t *meta) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    Writing w = {cfg, params, bias, set.prefix, json_object(), 0, NULL, tmp};
    json_object_set_new(w.header, "__metadata__", meta);
    for_each_tensor(cfg, set, describe_one, &w);
    char *text = json_dumps(w.header, JSON_COMPACT | JSON_PRESERVE_ORDER);
    const size_t n = strlen(text), padded = (n + 7) / 8 * 8; /* the data area starts 8-byte aligned */
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(padded >> (8 * i));
    w.out = bs_fopen(tmp, "wb");
    bs_fwrite_all(len, 8, w.out, tmp);
    bs_fwrite_all(text, n, w.out, tmp);
    bs_fwrite_all("        ", padded - n, w.out, tmp);
    for_each_tensor(cfg, set, write_one, &w);
    bs_fclose_synced(w.out, tmp);
    if (rename(tmp, path) != 0) bs_die("cannot rename %s to %s: %s", tmp, path, strerror(errno));
    free(text);
    json_decref(w.header);
}

void safetensors_write(const char *path, const GPT *model) {
    write_tensors(path, &model->cfg, model->params, model->moe_bias, MODEL_KINDS, metadata(&model->cfg));
}

void safetensors_write_adapters(const char *path, const GPTConfig *cfg, const float *params) {
    write_tensors(path, cfg, params, NULL, ADAPTER_KINDS, json_pack("{s:s}", "format", "pt"));
}

void safetensors_write_hf_config(const char *path, const GPTConfig *cfg) {
    json_t *j = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:f, s:f, s:f, s:b, s:b, s:n}",
                          "architectures", "GPT2LMHeadModel", "model_type", "gpt2", "n_layer", cfg->num_layers,
                          "n_head", cfg->num_heads, "n_embd", cfg->channels, "n_positions", cfg->max_seq_len,
                          "vocab_size", cfg->vocab_size, "activation_function", "gelu_new", "layer_norm_epsilon",
                          1e-5, "resid_pdrop", 0.0, "embd_pdrop", 0.0, "attn_pdrop", 0.0, "scale_attn_weights", 1,
                          "tie_word_embeddings", 1, "n_inner");
    if (gpt_is_moe(cfg)) { /* no transformers class: a model_type its Auto classes refuse (safetensors_moe.h) */
        json_object_set_new(j, "architectures", json_pack("[s]", "GPT2MoEForCausalLM"));
        json_object_set_new(j, "model_type", json_string(ST_MOE_MODEL_TYPE));
        st_moe_describe(cfg, j, false);
    }
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    bs_write_file_atomic(path, text, strlen(text));
    free(text);
    json_decref(j);
}
