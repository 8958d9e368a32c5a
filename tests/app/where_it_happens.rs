//! "Where it happens" is the failing upload's environment (issue 39 item 7): the GPU, driver,
//! CUDA and torch versions its log states, else the `collect_env` text it was sent with; never
//! the worker that reproduced it (a CPU worker's "cpu" and its own torch).

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::jobs::{claim_ok, result_body, tokens};
use crate::support::TestApp;
use crate::triage::group;

/// An illegal memory access in `train.py`, its log opening with `header`.
fn failing_log(header: &str) -> String {
    format!(
        "{header}Traceback (most recent call last):\n  \
         File \"/srv/vision/train.py\", line 57, in <module>\n    loss.item()\n\
         RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
}

/// Uploads `log` with a reproduction script and `meta`: (report id, group id, job id).
async fn upload_with_script(app: &TestApp, token: &str, log: &str, meta: Value) -> (i64, i64, i64) {
    let meta = meta.to_string();
    let res = app
        .upload(
            token,
            &[
                ("log", Some("train.log"), log.as_bytes()),
                ("script", Some("repro.py"), b"import torch\n".as_slice()),
                ("meta", None, meta.as_bytes()),
            ],
            None,
        )
        .await;
    assert_eq!(res.status, StatusCode::CREATED, "{}", res.body);
    let v = res.json();
    (
        v["id"].as_i64().unwrap(),
        v["group_id"].as_i64().unwrap(),
        v["repro"]["job_id"].as_i64().unwrap(),
    )
}

/// A CPU worker claims the next job and reports that it reproduced the failure on its own
/// torch, on the CPU.
async fn reproduce_on_cpu(app: &TestApp, worker: &str, job: i64) {
    let (claimed, lease, _) = claim_ok(app, worker, "cpu-host").await;
    assert_eq!(claimed, job);
    let mut body = result_body(
        &lease,
        "",
        "RuntimeError: CUDA error: an illegal memory access was encountered\n",
    );
    body["gpu"] = Value::Null;
    body["no_gpu"] = json!(true);
    body["cpu_translation"] = json!(true);
    body["environment"] = json!({"python": "3.11.2", "torch": "2.5.0+cpu", "cuda_build": null,
                                  "hip_build": null, "device": "cpu"});
    let res = app
        .post_json(worker, &format!("/api/v1/jobs/{job}/result"), &body)
        .await;
    assert_eq!(res.status, StatusCode::OK, "{}", res.body);
}

/// The values of tag `name`, with their counts.
fn tag(g: &Value, name: &str) -> Vec<(String, i64)> {
    (g["tags"][name].as_array().expect(name).iter())
        .map(|c| {
            (
                c["value"].as_str().unwrap().to_owned(),
                c["count"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn one(value: &str) -> Vec<(String, i64)> {
    vec![(value.to_owned(), 1)]
}

#[tokio::test]
async fn where_it_happens_is_the_failing_uploads_environment_not_the_reproducing_workers() {
    let app = TestApp::spawn().await;
    let (ingest, worker) = tokens(&app).await;
    // The log states where it failed.
    let stated = failing_log(
        "PyTorch version: 2.3.1+cu121\nCUDA used to build PyTorch: 12.1\n\
         Nvidia driver version: 535.104.05\n\
         GPU models and configuration: GPU 0: NVIDIA A100-SXM4-80GB\n",
    );
    let (_, group_id, job) = upload_with_script(&app, &ingest, &stated, json!({})).await;
    reproduce_on_cpu(&app, &worker, job).await;
    // The same failure, its environment sent by the uploader as collect_env output.
    let collect_env = "PyTorch version: 2.4.0+cu124\nCUDA used to build PyTorch: 12.4\n\
                       Nvidia driver version: 550.54.15\n\
                       GPU models and configuration: GPU 0: NVIDIA H100 80GB HBM3\n";
    let (_, same, job) = upload_with_script(
        &app,
        &ingest,
        &failing_log(""),
        json!({"environment": collect_env}),
    )
    .await;
    assert_eq!(same, group_id);
    reproduce_on_cpu(&app, &worker, job).await;
    // And once with nothing said about where: the CPU worker that reproduced it adds nothing.
    let (_, again, job) = upload_with_script(
        &app,
        &ingest,
        &failing_log("run 3\n"),
        json!({"project": "vision"}),
    )
    .await;
    assert_eq!(again, group_id);
    reproduce_on_cpu(&app, &worker, job).await;

    let g = group(&app, &ingest, group_id).await;
    assert_eq!(g["count"], 3);
    let mut gpus = tag(&g, "gpu");
    gpus.sort();
    assert_eq!(
        gpus,
        vec![
            ("NVIDIA A100-SXM4-80GB".to_owned(), 1),
            ("NVIDIA H100 80GB HBM3".to_owned(), 1)
        ]
    );
    let mut torch = tag(&g, "torch_version");
    torch.sort();
    assert_eq!(
        torch,
        vec![("2.3.1+cu121".to_owned(), 1), ("2.4.0+cu124".to_owned(), 1)]
    );
    let mut drivers = tag(&g, "driver_version");
    drivers.sort();
    assert_eq!(
        drivers,
        vec![("535.104.05".to_owned(), 1), ("550.54.15".to_owned(), 1)]
    );
    let mut cuda = tag(&g, "cuda_version");
    cuda.sort();
    assert_eq!(cuda, vec![("12.1".to_owned(), 1), ("12.4".to_owned(), 1)]);
    assert_eq!(tag(&g, "project"), one("vision"));

    // The group page shows the same, with the driver and CUDA rows.
    let b = crate::browse::sign_in(&app, &ingest).await;
    let page = crate::browse::page(&app, &b.cookie, &format!("/groups/{group_id}")).await;
    let captions = crate::browse::texts(&page.body, "#tags caption");
    for label in ["GPU", "Driver", "CUDA", "torch"] {
        assert!(captions.iter().any(|c| c == label), "{captions:?}");
    }
    let values = crate::browse::texts(&page.body, "#tags td.value");
    assert!(
        !values.iter().any(|v| v == "cpu" || v.contains("+cpu")),
        "{values:?}"
    );
}
