//! A roundtable-speaking test peer on 127.0.0.1 (in progress).
