#include "v8_runtime.h"

const char *v8_status_name(v8_status status) {
    switch (status) {
    case V8_OK: return "ok";
    case V8_ERR_NULL_ARGUMENT: return "null argument";
    case V8_ERR_BAD_DIMENSION: return "bad dimension";
    case V8_ERR_UNKNOWN_SELECTOR: return "unknown contract selector";
    case V8_ERR_BAD_THREADING: return "bad threading";
    case V8_ERR_NO_MEMORY: return "out of memory";
    case V8_ERR_UNSUPPORTED_ISA: return "unsupported ISA";
    }
    return "unknown status";
}
