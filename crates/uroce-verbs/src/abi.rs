//! The C structures of `<infiniband/verbs.h>` (the next commit).
