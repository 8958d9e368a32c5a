-- A reproduction run under CPU translation (issue 17): the worker had no GPU, so it ran the
-- script unchanged with CUDA redirected to the CPU, where PyTorch checks indices synchronously.
ALTER TABLE reproductions ADD COLUMN cpu_translation boolean NOT NULL DEFAULT false;
