//! Tests of the Agora adapter against a real relay on 127.0.0.1 (in progress).
