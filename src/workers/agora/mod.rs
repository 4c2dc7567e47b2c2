//! Agora adapter (in progress).
