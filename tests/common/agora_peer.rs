//! An Agora relay and agent on 127.0.0.1 (in progress).
