//! Tests of the factagora adapter against a real HTTP server on 127.0.0.1 (in progress).
