#!/usr/bin/env bash
# The compile-time measure of issue #19 on candle-nn 0.11.1 (feature `candle`): see
# scripts/compile-time.sh.
exec "$(dirname "$0")/compile-time.sh" candle-nn 0.11.1 candle
