//! factagora adapter (in progress).
