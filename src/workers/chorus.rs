//! chorus adapter (in progress).
