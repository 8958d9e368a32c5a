use super::*;
use crate::ingest::file_scan;
use crate::rules::Ruleset;
use crate::rules::run::ActionKind;

fn ruleset() -> Ruleset {
    Ruleset::builtin().expect("builtin")
}

/// A file as the upload prepares it: classified, scanned at its root-cause line.
fn input(rs: &Ruleset, name: &str, text: &str) -> FileInput {
    let classification = rs.classify_bytes(name, text.as_bytes());
    let wanted: Vec<usize> = classification.root_cause.iter().map(|r| r.line).collect();
    let scan = file_scan::scan(text.as_bytes(), &wanted).expect("scan");
    FileInput {
        name: name.into(),
        bytes: text.len() as u64,
        lines: text.lines().count() as u64,
        first_line: 1,
        classification,
        scan,
        attempts: Vec::new(),
    }
}

fn roles(story: &RunStory) -> Vec<(&str, FileRole, Option<&str>)> {
    story
        .files
        .iter()
        .map(|f| (f.name.as_str(), f.role, f.consequence_of.as_deref()))
        .collect()
}

/// tests/tune/cases/1203.log (FunASR, eight ranks) split per rank, with the scheduler's output.
#[test]
fn an_oom_on_one_rank_comes_before_the_other_ranks_timeouts() {
    let rs = ruleset();
    let log = include_str!("../../../tests/tune/cases/1203.log");
    let mut per_rank: std::collections::BTreeMap<u32, String> = Default::default();
    for line in log.lines() {
        let rank = crate::ingest::normalize::rank_prefix(line)
            .or_else(|| {
                crate::ingest::origin::from_line(line)
                    .gpu
                    .and_then(|g| g[5..].parse().ok())
            })
            .expect("every line names its rank or local rank");
        let text = per_rank.entry(rank).or_default();
        text.push_str(line);
        text.push('\n');
    }
    assert_eq!(
        per_rank.keys().copied().collect::<Vec<_>>(),
        [0, 2, 4, 5, 6]
    );
    // Reversed: the timeouts come before the OOM in file order.
    let mut files: Vec<FileInput> = per_rank
        .iter()
        .rev()
        .map(|(rank, text)| input(&rs, &format!("logs/rank{rank}.log"), text))
        .collect();
    files.push(input(
        &rs,
        "slurm-77.out",
        "srun: error: train-w-0: task 2: Exited with exit code 1\nsrun: error: train-w-0: task 5: Terminated\n",
    ));
    let story = tell(files, Vec::new());
    let first = story.first_failure.as_ref().expect("a first failure");
    assert_eq!(first.file, "logs/rank2.log");
    assert_eq!((first.line, first.rank), (1, Some(2)));
    assert_eq!(first.category, Category::OutOfMemory);
    assert_eq!(
        first.host.as_deref(),
        Some("liangxianchen-funasr-15wh-train-lxc0-w-0")
    );
    let r = roles(&story);
    assert!(
        r.contains(&(
            "logs/rank5.log",
            FileRole::Consequence,
            Some("logs/rank2.log")
        )),
        "{r:?}"
    );
    assert!(
        r.contains(&(
            "slurm-77.out",
            FileRole::Consequence,
            Some("logs/rank2.log")
        )),
        "{r:?}"
    );
    assert_eq!(
        story.action.kind,
        ActionKind::FixCode,
        "{}",
        story.action.reason
    );
    assert!(
        story.action.reason.contains("rank 2"),
        "{}",
        story.action.reason
    );
}

#[test]
fn the_earliest_stamp_wins_across_formats() {
    let rs = ruleset();
    let files = vec![
        input(
            &rs,
            "rank0.log",
            "2024-06-25T13:46:40.000Z step 9\n2024-06-25T13:46:40.100Z RuntimeError: CUDA error: an illegal memory access was encountered\n",
        ),
        input(
            &rs,
            "rank1.log",
            "E0625 13:46:36.560000 1 x.cc:1] step\nRuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:1 and cpu!\n",
        ),
    ];
    let story = tell(files, Vec::new());
    let first = story.first_failure.expect("first");
    assert_eq!(
        (first.file.as_str(), first.rank, first.gpu.as_deref()),
        ("rank1.log", Some(1), Some("cuda:1"))
    );
    assert_eq!(story.files[0].role, FileRole::Failure);
    assert_eq!(story.files[1].order, Some(0));
    assert!(story.files[0].at_ms > story.files[1].at_ms);
}

#[test]
fn a_fallen_gpu_in_the_journal_drains_its_node_only() {
    let rs = ruleset();
    let files = vec![
        input(
            &rs,
            "node-7/rank3.log",
            "[rank3]: RuntimeError: CUDA error: unspecified launch failure\n",
        ),
        input(
            &rs,
            "node-7/journal.txt",
            "Jun 25 13:46:36 node-7 kernel: [ 7386.259769] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus.\n",
        ),
        input(
            &rs,
            "node-8/rank4.log",
            "[rank4]: [E ProcessGroupNCCL.cpp:563] [Rank 4] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=15734, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600037 milliseconds before timing out.\n",
        ),
    ];
    let story = tell(files, Vec::new());
    assert_eq!(
        story.action.kind,
        ActionKind::DrainNode,
        "{}",
        story.action.reason
    );
    assert_eq!(story.action.nodes, ["node-7"]);
    assert_eq!(story.action.gpus, ["PCI:0000:3b:00"]);
    assert!(
        story.action.reason.contains("Xid 79"),
        "{}",
        story.action.reason
    );
}

#[test]
fn timeouts_with_no_cause_anywhere_mean_restart() {
    let rs = ruleset();
    let timeout = |r: u32| {
        format!(
            "[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800091 milliseconds before timing out.\n"
        )
    };
    let files = vec![
        input(&rs, "rank0.log", &timeout(0)),
        input(&rs, "rank1.log", &timeout(1)),
        input(&rs, "launcher.log", "step 1\nall good\n"),
    ];
    let story = tell(files, Vec::new());
    assert_eq!(
        story.action.kind,
        ActionKind::Restart,
        "{}",
        story.action.reason
    );
    assert_eq!(story.first_failure.as_ref().map(|f| f.rank), Some(Some(0)));
    assert_eq!(
        roles(&story),
        [
            ("rank0.log", FileRole::FirstFailure, None),
            ("rank1.log", FileRole::Consequence, Some("rank0.log")),
            ("launcher.log", FileRole::Clean, None),
        ]
    );
}

#[test]
fn a_driver_too_old_means_fixing_the_environment() {
    let rs = ruleset();
    let files = vec![input(
        &rs,
        "rank0.log",
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please update your GPU driver\n",
    )];
    let story = tell(files, Vec::new());
    assert_eq!(
        story.action.kind,
        ActionKind::FixEnvironment,
        "{}",
        story.action.reason
    );
}

#[test]
fn an_xid_the_program_causes_means_fixing_the_code_not_the_node() {
    let rs = ruleset();
    let files = vec![input(
        &rs,
        "node-7/journal.txt",
        "Jun 25 13:40:01 node-7 kernel: [ 9000.000001] NVRM: Xid (PCI:0000:3b:00): 13, pid=15325, Graphics Exception\n",
    )];
    let story = tell(files, Vec::new());
    assert_eq!(
        story.action.kind,
        ActionKind::FixCode,
        "{}",
        story.action.reason
    );
    assert!(
        story.action.reason.contains("Xid 13"),
        "{}",
        story.action.reason
    );
}
