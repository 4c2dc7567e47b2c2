//! Unit tests of the pure core, driven step by step.
