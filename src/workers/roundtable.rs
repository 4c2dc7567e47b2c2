//! roundtable adapter (in progress).
