#!/usr/bin/env bash
# The compile-time measure of issue #19 on linfa-clustering 0.8.1 (feature `ndarray`), a crate of
# another style than candle's (ndarray generics): see scripts/compile-time.sh.
exec "$(dirname "$0")/compile-time.sh" linfa-clustering 0.8.1 ndarray
