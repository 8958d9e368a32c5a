-- Environment facts of a reproduction run (issue 17): the interpreter's Python and torch
-- versions, its CUDA/HIP build, and the device (name and compute capability, or "cpu").
ALTER TABLE reproductions ADD COLUMN environment jsonb;
