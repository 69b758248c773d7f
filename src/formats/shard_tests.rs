//! Tests of packed arrays: constructors, the §8 worked example, decoding and ranged reads.
