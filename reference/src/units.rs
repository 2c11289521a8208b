//! pint-compatible unit grammar
