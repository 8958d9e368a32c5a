//! How the domain's enums sit in `text` columns: the job state, the category, the confidence,
//! the reclassification run's state, a group's triage state and its history's actions and the
//! webhook enums (event, format, delivery state), the kind of an actor and a person's role are
//! decoded into their Rust enums here, at the storage boundary, and encoded back from them, so
//! no caller compares them as strings. A stored value this build does not know is a decode
//! error, never a silent default.

use chrono::{DateTime, Utc};
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgTypeInfo, PgValueRef};
use sqlx::{Decode, Encode, Postgres, Type};

use super::reclassify_runs::RunState;
use crate::actor::ActorKind;
use crate::api_types::webhooks::{DeliveryState, EventKind, Format};
use crate::api_types::{GroupAction, GroupState, JobState};
use crate::roles::PersonRole;
use crate::rules::{Category, Confidence};
use crate::time::Timestamp;

/// Implements `Type`, `Decode` and `Encode` for an enum stored as its `as_str()` spelling.
macro_rules! text_enum {
    ($ty:ty, $parse:expr, $what:literal) => {
        impl Type<Postgres> for $ty {
            fn type_info() -> PgTypeInfo {
                <String as Type<Postgres>>::type_info()
            }
            fn compatible(ty: &PgTypeInfo) -> bool {
                <String as Type<Postgres>>::compatible(ty)
            }
        }

        impl<'r> Decode<'r, Postgres> for $ty {
            fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
                let text = <&str as Decode<Postgres>>::decode(value)?;
                let parse: fn(&str) -> Option<$ty> = $parse;
                parse(text).ok_or_else(|| format!(concat!("unknown ", $what, " {:?}"), text).into())
            }
        }

        impl Encode<'_, Postgres> for $ty {
            fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
                <&str as Encode<Postgres>>::encode(self.as_str(), buf)
            }
        }
    };
}

text_enum!(JobState, JobState::parse, "job state");
text_enum!(Category, |s| s.parse().ok(), "category");
text_enum!(Confidence, |s| s.parse().ok(), "confidence");
text_enum!(RunState, RunState::parse, "reclassification run state");
text_enum!(GroupState, GroupState::parse, "group state");
text_enum!(GroupAction, GroupAction::parse, "group history action");
text_enum!(ActorKind, ActorKind::parse, "actor kind");
text_enum!(PersonRole, |s| s.parse().ok(), "person role");
text_enum!(EventKind, EventKind::parse, "webhook event");
text_enum!(Format, Format::parse, "webhook format");
text_enum!(
    DeliveryState,
    DeliveryState::parse,
    "webhook delivery state"
);

/// A moment stored as `timestamptz`, decoded by sqlx into chrono's `DateTime<Utc>` and kept to
/// the whole second.
impl Type<Postgres> for Timestamp {
    fn type_info() -> PgTypeInfo {
        <DateTime<Utc> as Type<Postgres>>::type_info()
    }
    fn compatible(ty: &PgTypeInfo) -> bool {
        <DateTime<Utc> as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for Timestamp {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Timestamp::of(<DateTime<Utc> as Decode<Postgres>>::decode(
            value,
        )?))
    }
}
