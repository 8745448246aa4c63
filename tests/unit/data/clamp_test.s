// A clamp kernel for pass tests: ClampParams {MemRefData in, out; f16 lo, hi}.
    .text
    .global clamp_test
clamp_test:
    halt
