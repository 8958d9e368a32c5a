-- Set-based seeding for `cargo bench --bench search` (benches/search.rs): deterministic
-- reports, groups, fixes and search documents shaped like the upload pipeline's
-- (app::upload::search_doc), generated in SQL so a million reports take minutes. Everything
-- here lives in schema bench_seed; the bench calls bench_seed.seed_groups, seed_reports (in
-- id ranges, from two connections) and seed_rest.
DROP SCHEMA IF EXISTS bench_seed CASCADE;
CREATE SCHEMA bench_seed;

-- A deterministic pseudo-random number per (row, purpose).
CREATE FUNCTION bench_seed.h(i bigint, salt int) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT abs(hashint8(i * 1000003 + salt)) $$;
CREATE FUNCTION bench_seed.pick(a text[], k bigint) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT a[1 + (k % cardinality(a))::int] $$;
-- A made-up word (5-10 letters) from a pool of as many as asked: custom kernels, experiment
-- branches and run names, so the vocabulary and the rare words are realistic in number.
CREATE FUNCTION bench_seed.pword(k bigint) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT translate(substr(md5('w' || k), 1, 5 + (k % 6)::int), '0123456789', 'aeioubklmr') $$;

-- Root causes and symptoms per category; weight = share of reports in percent.
CREATE TABLE bench_seed.cats (category text, weight int, title text, roots text[], symptoms text[]);
INSERT INTO bench_seed.cats VALUES
 ('out_of_memory', 22, 'CUDA out of memory',
  ARRAY['torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %s.00 MiB. GPU %s has a total capacity of 79.15 GiB of which %s.00 MiB is free.',
        'RuntimeError: CUDA out of memory. Tried to allocate %s.00 GiB (GPU %s; 39.59 GiB total capacity; %s.12 GiB already allocated)',
        'torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate %s MiB'],
  ARRAY['RuntimeError: CUDA error: out of memory', 'CUDACachingAllocator.cpp:1234: out of memory while allocating workspace']),
 ('out_of_bounds', 14, 'Index out of range in a CUDA kernel (device-side assert)',
  ARRAY['/pytorch/aten/src/ATen/native/cuda/Indexing.cu:%s: indexSelectSmallIndex: block: [%s,0,0], thread: [%s,0,0] Assertion `srcIndex < srcSelectDimSize` failed.',
        '/pytorch/aten/src/ATen/native/cuda/Loss.cu:%s: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [%s,0,0] Assertion `t >= 0 && t < n_classes` failed.',
        'IndexError: index %s is out of bounds for dimension 0 with size %s'],
  ARRAY['RuntimeError: CUDA error: device-side assert triggered', 'CUDA kernel errors might be asynchronously reported at some other API call']),
 ('illegal_memory_access', 10, 'Illegal memory access in a CUDA kernel',
  ARRAY['RuntimeError: CUDA error: an illegal memory access was encountered (kernel_%s)',
        'CUDA error: an illegal memory access was encountered at cudaMemcpyAsync stream %s',
        'cudaErrorIllegalAddress: an illegal memory access was encountered in fused_attention_%s'],
  ARRAY['CUDA kernel errors might be asynchronously reported at some other API call', 'terminate called after throwing an instance of c10::Error']),
 ('device_mismatch', 8, 'Tensors on different devices',
  ARRAY['RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:%s and cpu!',
        'RuntimeError: Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the same (layer %s)'],
  ARRAY['while checking argument for argument mat1 in method wrapper_CUDA_addmm']),
 ('dtype_mismatch', 7, 'Tensor dtype mismatch',
  ARRAY['RuntimeError: expected scalar type Half but found Float (op %s)',
        'RuntimeError: mat1 and mat2 must have the same dtype, but got BFloat16 and Float (%s)'],
  ARRAY['autocast is enabled but the module was not converted']),
 ('shape_mismatch', 10, 'Tensor shape mismatch',
  ARRAY['RuntimeError: mat1 and mat2 shapes cannot be multiplied (%sx768 and %sx1152)',
        'RuntimeError: The size of tensor a (%s) must match the size of tensor b (%s) at non-singleton dimension 1'],
  ARRAY['ValueError: Expected input batch_size to match target batch_size']),
 ('driver_issue', 6, 'CUDA driver problem',
  ARRAY['RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version (driver %s)',
        'cudaErrorNoDevice: no CUDA-capable device is detected on node gpu-%s',
        'RuntimeError: CUDA error: unknown error (Xid %s)'],
  ARRAY['NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver']),
 ('nccl_error', 10, 'NCCL communication failure',
  ARRAY['torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:%s, unhandled system error',
        '[Rank %s] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=%s, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.'],
  ARRAY['NCCL WARN NET/IB : Got completion with error 12', 'ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.']),
 ('library_error', 5, 'cuDNN or cuBLAS failure',
  ARRAY['RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR (conv %s)',
        'RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling cublasSgemm (m=%s)'],
  ARRAY['You can try to repro this exception using the following code snippet']),
 ('unknown', 8, 'Unknown failure',
  ARRAY['Segmentation fault (core dumped) in worker %s', 'Killed: process %s received SIGKILL'],
  ARRAY['ERROR: process exited with code 139']);
CREATE TABLE bench_seed.slots AS
SELECT (row_number() OVER ()) - 1 AS slot, c.* FROM bench_seed.cats c, generate_series(1, c.weight);

-- Groups, one per fingerprint; reports pick them skewed (a few groups hold most reports).
CREATE FUNCTION bench_seed.seed_groups(n int) RETURNS void
LANGUAGE sql SET search_path = public, bench_seed AS $f$
INSERT INTO groups (id, fingerprint, category, title, root_cause_text, first_seen, last_seen)
SELECT g, 'seed-' || g, s.category, s.title,
       format(pick(s.roots, h(g, 2)), h(g, 3) % 4000, h(g, 4) % 8, h(g, 5) % 512),
       timestamptz '2024-01-01', timestamptz '2024-01-01'
FROM generate_series(1, n) g
JOIN slots s ON s.slot = h(g, 1) % 100;
SELECT setval('groups_id_seq', n);
$f$;

-- Reports lo..hi (one every 30 seconds from 2024-01-01) and their search documents.
CREATE FUNCTION bench_seed.seed_reports(lo bigint, hi bigint, ngroups int) RETURNS void
LANGUAGE sql SET search_path = public, bench_seed AS $f$
INSERT INTO reports (id, created_at, project, job_url, commit_sha, branch, filename, group_id,
    category, title, confidence, root_cause_line, root_cause_text, fingerprint, classification,
    log_sha256, log_bytes, log_lines)
SELECT i, timestamptz '2024-01-01' + i * interval '30 seconds', project,
       format('https://ci.example.com/%s/-/jobs/%s', project, 4000000 + i), sha, branch,
       filename, gid, category, title, 'high', 40 + (i % 300)::int, groot, 'seed-' || gid, '{}',
       decode(md5(i::text), 'hex'), 50000, 400
FROM (
  SELECT i, g.id AS gid, g.category, g.title, g.root_cause_text AS groot,
         pick(ARRAY['vision','nlp','speech','recsys','llm','diffusion','detection','segmentation',
                    'ranking','asr','tts','ocr','translation','retrieval','forecasting','robotics',
                    'rl','protein','weather','search'], h(i, 2))
           || '-' || pick(ARRAY['train','serving','eval','research','prod'], h(i, 3))
           || '-' || (h(i, 4) % 2 + 1) AS project,
         md5('c' || i) || left(md5('d' || i), 8) AS sha,
         pick(ARRAY['main','main','main','develop','release/2.4','feature/fused-attention',
                    'fix/oom-' || (h(i, 6) % 90), 'exp/' || pword(h(i, 7) % 5000)], h(i, 5)) AS branch,
         pick(ARRAY['train.log','stderr.txt','job.log','output.log',
                    format('slurm-%s.out', 700000 + i)], h(i, 8)) AS filename
  FROM generate_series(lo, hi) i
  JOIN groups g ON g.id = 1 + floor(ngroups * power((h(i, 1) % 1000000) / 1e6, 3))::int
) x;

INSERT INTO report_search (report_id, created_at, category, project, group_id, root, symptoms,
                           names, excerpt)
SELECT r.id, r.created_at, r.category, lower(r.project), r.group_id,
       r.title || E'\n' || r.root_cause_text,
       CASE WHEN h(r.id, 40) % 3 = 0 THEN '' ELSE pick(c.symptoms, h(r.id, 41)) END,
       concat_ws(E'\n', f.frames, r.filename, r.project, r.branch, r.commit_sha, r.job_url),
       concat_ws(E'\n',
         format('%s INFO launching %s model=%s batch_size=%s world_size=%s',
                r.created_at, r.project, m.model, 8 << (r.id % 5)::int, 1 << (r.id % 4)::int),
         format('INFO torch 2.%s.%s+cu12%s on NVIDIA %s', 3 + r.id % 3, r.id % 2, 1 + r.id % 4, m.gpu),
         format('epoch %s step %s loss=%s lr=3.0e-4 grad_norm=%s', r.id % 90, r.id % 20000,
                round(((r.id % 997) / 300.0)::numeric, 4), round(((r.id % 113) / 50.0)::numeric, 3)),
         'Traceback (most recent call last):',
         CASE WHEN r.category IN ('out_of_bounds', 'illegal_memory_access')
              THEN 'For debugging consider passing CUDA_LAUNCH_BLOCKING=1' END,
         format('ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: %s (pid: %s) of binary: /usr/bin/python3',
                r.id % 8, 10000 + r.id % 50000),
         format('wandb: run %s-%s failed', pword(h(r.id, 50) % 5000), r.id % 1000))
FROM reports r
JOIN cats c ON c.category = r.category
CROSS JOIN LATERAL (
  SELECT pick(ARRAY['resnet50','vit_b_16','bert-base-uncased','llama-2-7b','gpt2-medium','unet2d',
                    'whisper-small','t5-base','efficientnet_b0','mistral-7b','clip-vit-l-14',
                    'stable-diffusion-xl','yolov8n','convnext_tiny','deberta-v3'], h(r.id, 60)) AS model,
         pick(ARRAY['A100-SXM4-80GB','H100 80GB HBM3','V100-SXM2-32GB','RTX A6000','L4','A10G','T4'],
              h(r.id, 61)) AS gpu
) m
CROSS JOIN LATERAL (
  -- Three frames as the pipeline writes them: `path:NN basename function`, then the code line.
  SELECT string_agg(format('%s:%s %s %s', path, line, regexp_replace(path, '^.*/', ''), func)
                    || E'\n' || code, E'\n' ORDER BY k) AS frames
  FROM (
    SELECT k,
           '/srv/' || r.project || '/' || pick(ARRAY['train.py','model.py','data/loader.py',
               'trainer/loop.py','layers/attention.py','utils/metrics.py','eval.py','main.py',
               'models/resnet.py','models/transformer.py','data/augment.py','losses/focal.py',
               'optim/schedule.py','dist/launch.py','callbacks/checkpoint.py','tokenizer.py',
               'inference.py','serve/handler.py','layers/moe.py','data/collate.py'], h(r.id, 10 + k)) AS path,
           1 + (h(r.id, 20 + k) % 900) AS line,
           CASE WHEN k = 3 AND h(r.id, 30) % 10 < 3
                THEN 'fused_' || pword(h(r.id, 31) % 100000) || '_kernel'
                ELSE pick(ARRAY['main','train_one_epoch','forward','_call_impl','training_step',
                     'compute_loss','evaluate','backward','collate','__getitem__','step','run',
                     'attention','decode','encode','predict','validate','fit','_wrapped_call_impl',
                     'all_reduce'], h(r.id, 32 + k)) END AS func,
           pick(ARRAY['loss.item()','out = self.model(x)','loss = criterion(logits, labels)',
                'x = self.emb(idx)','logits = self.head(h)','optimizer.step()',
                'scaler.scale(loss).backward()','batch = next(it)','return forward_call(*args, **kwargs)',
                'y = F.cross_entropy(logits, target)','attn = q @ k.transpose(-2, -1)',
                'dist.all_reduce(t)','x = x.to(device)','preds = model.generate(ids)',
                'torch.cuda.synchronize()'], h(r.id, 36 + k)) AS code
    FROM generate_series(1, 3) k
  ) a
) f
WHERE r.id BETWEEN lo AND hi;
$f$;

-- Fixes for one group in seven, groups' first and last seen, and the vocabulary (the words of a
-- sample of documents, which holds every common word, plus the whole made-up pools).
CREATE FUNCTION bench_seed.seed_rest(n bigint) RETURNS void
LANGUAGE sql SET search_path = public, bench_seed AS $f$
INSERT INTO fixes (group_id, summary, details, link, author, created_at)
SELECT g.id,
       pick(ARRAY['labels started at 1; shift them to 0',
                  'reduce the batch size and enable gradient checkpointing',
                  'set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True',
                  'pin NCCL_IB_DISABLE=1 on the old cluster',
                  'upgrade the driver to 550 on the gpu nodes',
                  'cast the inputs to half under autocast',
                  'move the model to cuda before building the optimizer',
                  'pad the vocabulary to a multiple of 64',
                  'retry the job on another node: the GPU has Xid 79 errors'], h(g.id, 70))
         || ' (' || pword(h(g.id, 71) % 100000) || ')',
       'Seen in ' || g.category || '; see the runbook.', 'https://wiki.example.com/fixes/' || g.id,
       'bench', timestamptz '2024-01-01' + (h(g.id, 72) % (n * 30)) * interval '1 second'
FROM groups g WHERE h(g.id, 73) % 7 = 0;
UPDATE groups g SET first_seen = r.first, last_seen = r.last
FROM (SELECT group_id, min(created_at) AS first, max(created_at) AS last
      FROM reports GROUP BY group_id) r
WHERE r.group_id = g.id;
INSERT INTO search_words (word)
SELECT DISTINCT w
FROM report_search TABLESAMPLE SYSTEM (2) REPEATABLE (7),
     regexp_split_to_table(lower(root || ' ' || symptoms || ' ' || names || ' ' || excerpt),
                           '[^a-z0-9]+') AS w
WHERE w ~ '^[a-z][a-z0-9]{2,31}$' AND length(regexp_replace(w, '[^0-9]+', '', 'g')) <= 2
ON CONFLICT DO NOTHING;
INSERT INTO search_words (word)
SELECT pword(k) FROM generate_series(0, 99999) k
ON CONFLICT DO NOTHING;
$f$;
