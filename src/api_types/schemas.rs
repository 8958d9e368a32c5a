//! OpenAPI schemas of the types the wire embeds but that live outside `api_types`: the rules
//! engine's classification (DESIGN.md section 3) and its taxonomy, and `time::Timestamp`.
//! `rules/` and `time.rs` stay pure and free of the OpenAPI crate (STYLE.md), so their schemas
//! are written here by hand. They cannot drift unseen: enum values come from the types' own
//! lists, and `tests/app/openapi` checks fully and minimally populated values of every struct
//! here against these schemas, with unknown fields refused.

use std::borrow::Cow;

use utoipa::openapi::schema::{
    ArrayBuilder, KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type,
};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::rules::facts::{Facts, Memory};
use crate::rules::outcome::Outcome;
use crate::rules::{Category, Classification, Confidence, Finding, Role, RootCause, Stats};
use crate::time::Timestamp;

type Schemas = Vec<(String, RefOr<Schema>)>;

/// A `$ref` to `T`'s component schema.
fn reference<T: ToSchema>() -> RefOr<Schema> {
    Ref::from_schema_name(T::name()).into()
}

/// `T`'s schema, or null.
fn nullable<T: ToSchema>() -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .item(reference::<T>())
        .into()
}

/// Adds `T` and the schemas it refers to.
fn register<T: ToSchema>(out: &mut Schemas) {
    out.push((T::name().into_owned(), T::schema()));
    T::schemas(out);
}

fn string(description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .into()
}

/// A whole number of at least `min` (lines, bytes, ranks).
fn count(min: u32, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(min))
        .description(Some(description))
        .into()
}

fn boolean(description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::Boolean)
        .description(Some(description))
        .into()
}

fn array(items: RefOr<Schema>, description: &str) -> RefOr<Schema> {
    ArrayBuilder::new()
        .items(items)
        .description(Some(description))
        .into()
}

/// A string enum of `values`.
fn names<'a>(values: impl IntoIterator<Item = &'a str>, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values))
        .description(Some(description))
        .into()
}

impl PartialSchema for Timestamp {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
            .description(Some(
                "A moment in UTC, to the second: `2026-11-24T16:52:28Z`.",
            ))
            .into()
    }
}

impl ToSchema for Timestamp {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Timestamp")
    }
}

impl PartialSchema for super::Sandbox {
    fn schema() -> RefOr<Schema> {
        names(
            ["bwrap", "none"],
            "How a worker isolates scripts: `bwrap` (bubblewrap) or `none` \
             (`--unsafe-no-sandbox`, recorded and shown).",
        )
    }
}

impl ToSchema for super::Sandbox {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Sandbox")
    }
}

impl PartialSchema for Category {
    fn schema() -> RefOr<Schema> {
        names(
            Category::ALL.map(Category::as_str),
            "The taxonomy (DESIGN.md section 2): the root cause's category.",
        )
    }
}

impl ToSchema for Category {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Category")
    }
}

impl PartialSchema for Outcome {
    fn schema() -> RefOr<Schema> {
        names(
            Outcome::ALL.map(Outcome::as_str),
            "What a reproduction run showed: `reproduced` (the script failed), `did_not_fail` \
             (it ran to the end), `environment_error` (it stopped for a reason of the worker's \
             environment before reaching the failure: a missing module or interpreter, a syntax \
             error in the script, a call the sandbox denied; the report keeps the log's \
             classification and the job may be re-queued once the worker is fixed), `timed_out` \
             (stopped at the time limit), `sandbox_error` (the worker could not start it).",
        )
    }
}

impl ToSchema for Outcome {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Outcome")
    }
}

impl PartialSchema for Confidence {
    fn schema() -> RefOr<Schema> {
        // A new variant fails to compile here until it is listed.
        let all = |c: Confidence| match c {
            Confidence::High | Confidence::Medium | Confidence::Low | Confidence::Likely => {
                c.as_str()
            }
        };
        names(
            Confidence::ALL.map(all),
            "How sure the engine is about the root cause: `high` or `medium` for a rule hit, \
             `likely` for the learned fallback's category (with `basis`), `low` for `unknown`.",
        )
    }
}

impl ToSchema for Confidence {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Confidence")
    }
}

impl PartialSchema for Role {
    fn schema() -> RefOr<Schema> {
        let name = |r: Role| match r {
            Role::RootCause => "root_cause",
            Role::Symptom => "symptom",
        };
        names(
            [Role::RootCause, Role::Symptom].map(name),
            "Whether a finding is the root cause or a consequence of it.",
        )
    }
}

impl ToSchema for Role {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Role")
    }
}

impl PartialSchema for RootCause {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .description(Some("The root-cause line of a classification."))
            .property("line", count(1, "1-based line of the input as given."))
            .required("line")
            .property("text", string("The cleaned text of that line."))
            .required("text")
            .property("rule", string("The rule that named it."))
            .required("rule")
            .into()
    }
}

impl ToSchema for RootCause {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("RootCause")
    }
}

impl PartialSchema for Finding {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .description(Some("One rule hit."))
            .property("rule", string("The rule id."))
            .required("rule")
            .property("category", reference::<Category>())
            .required("category")
            .property("role", reference::<Role>())
            .required("role")
            .property("line", count(1, "1-based line of the input as given."))
            .required("line")
            .property("text", string("The cleaned text of that line."))
            .required("text")
            .into()
    }
}

impl ToSchema for Finding {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Finding")
    }

    fn schemas(out: &mut Schemas) {
        register::<Category>(out);
        register::<Role>(out);
    }
}

impl PartialSchema for Memory {
    fn schema() -> RefOr<Schema> {
        let bytes = |d| count(0, d);
        ObjectBuilder::new()
            .description(Some(
                "GPU memory figures in bytes; a key is present only when the log states it.",
            ))
            .property(
                "requested_bytes",
                bytes("Bytes the failed allocation asked for."),
            )
            .property("total_bytes", bytes("Total capacity of the GPU."))
            .property(
                "free_bytes",
                bytes("Free memory at the time of the failure."),
            )
            .property("allocated_bytes", bytes("Memory allocated by PyTorch."))
            .property(
                "reserved_bytes",
                bytes("Memory reserved by PyTorch's caching allocator."),
            )
            .into()
    }
}

impl ToSchema for Memory {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Memory")
    }
}

impl PartialSchema for Facts {
    fn schema() -> RefOr<Schema> {
        let strings = |d| array(ObjectBuilder::new().schema_type(Type::String).into(), d);
        ObjectBuilder::new()
            .description(Some(
                "Typed facts the log states; a key is present only when the log states it.",
            ))
            .property("memory", reference::<Memory>())
            .property(
                "devices",
                strings("Devices named by a mismatch, in message order (`cuda:0`, `cpu`)."),
            )
            .property(
                "dtypes",
                strings("Dtypes named by a mismatch, `[expected, actual]` where the message says."),
            )
            .property(
                "shapes",
                strings("Shapes named by a mismatch, dimensions joined by `x`."),
            )
            .property(
                "ranks",
                array(
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                        .minimum(Some(0))
                        .maximum(Some(u32::MAX))
                        .description(Some("A rank."))
                        .into(),
                    "Distributed ranks involved, ascending.",
                ),
            )
            .property(
                "failing_rank",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                    .minimum(Some(0))
                    .maximum(Some(u32::MAX))
                    .description(Some(
                        "The rank whose line is the root cause: the rank that failed first.",
                    )),
            )
            .property(
                "failing_host",
                string("The host the root-cause line comes from."),
            )
            .property(
                "failing_gpu",
                string("The GPU the root-cause line names: `cuda:N`, or a PCI bus id."),
            )
            .property("gpu", string("GPU model name."))
            .property("arch", string("Compute capability (`sm_86`)."))
            .property("torch_version", string("PyTorch version."))
            .property("cuda_version", string("CUDA (toolkit or runtime) version."))
            .property("driver_version", string("NVIDIA driver version."))
            .property("nccl_version", string("NCCL version."))
            .into()
    }
}

impl ToSchema for Facts {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Facts")
    }

    fn schemas(out: &mut Schemas) {
        register::<Memory>(out);
    }
}

impl PartialSchema for Stats {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .description(Some("Size of the input that was classified."))
            .property("bytes", count(0, "Bytes read."))
            .required("bytes")
            .property("lines", count(0, "Lines read."))
            .required("lines")
            .into()
    }
}

impl ToSchema for Stats {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Stats")
    }
}

impl PartialSchema for Classification {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .description(Some(
                "The classification of one log (DESIGN.md section 3), as `gpu-triage classify \
                 --format json` prints it.",
            ))
            .property("source", string("Path of the input, or `-`."))
            .required("source")
            .property("category", reference::<Category>())
            .required("category")
            .property("title", string("Human title of the root cause."))
            .required("title")
            .property("confidence", reference::<Confidence>())
            .required("confidence")
            .property("root_cause", nullable::<RootCause>())
            .required("root_cause")
            .property(
                "findings",
                array(reference::<Finding>(), "Every rule hit, root cause first."),
            )
            .required("findings")
            .property("facts", reference::<Facts>())
            .required("facts")
            .property(
                "async_hint",
                boolean(
                    "The log says errors may be reported asynchronously (or recommends \
                     CUDA_LAUNCH_BLOCKING=1): a reproduction run finds the true line.",
                ),
            )
            .required("async_hint")
            .property("next_steps", array(string("A step."), "What to do next."))
            .required("next_steps")
            .property(
                "fingerprint",
                string(
                    "sha256 hex of the normalized root-cause signature: groups recurring failures.",
                ),
            )
            .required("fingerprint")
            .property(
                "signature",
                string(
                    "The failure's shape for similarity search (root cause with numbers taken \
                     out, and the user's frames); absent when empty.",
                ),
            )
            .property(
                "notes",
                array(
                    string("A remark."),
                    "Remarks about the input itself (empty, binary, truncated); absent when none.",
                ),
            )
            .property(
                "basis",
                array(
                    string("A word of the root-cause line."),
                    "With confidence `likely`: the words that decided the learned fallback's \
                     category, most decisive first; absent otherwise.",
                ),
            )
            .property(
                "framework",
                string(
                    "The framework or runtime the log comes from (pytorch, tensorflow, jax, \
                     rocm, llama.cpp, onnxruntime, tensorrt, triton, paddle, rapids, cupy, mlx, \
                     kubernetes, slurm, docker); absent when not recognisable.",
                ),
            )
            .property("stats", reference::<Stats>())
            .required("stats")
            .into()
    }
}

impl ToSchema for Classification {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Classification")
    }

    fn schemas(out: &mut Schemas) {
        register::<Category>(out);
        register::<Confidence>(out);
        register::<RootCause>(out);
        register::<Finding>(out);
        register::<Facts>(out);
        register::<Stats>(out);
    }
}
