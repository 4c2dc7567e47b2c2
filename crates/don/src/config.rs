//! The `[don]` section: this DON's id and config version (as set on the forwarder), its
//! fault tolerance f, this member's listen address, every member's signer address and
//! endpoint, and the consensus timers; with the checks start-up makes.

use alloy::primitives::Address;
use cresolver_core::schema::duration;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::time::Duration;
use url::Url;

/// One member of the DON: the address its key signs with, and where it listens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberConfig {
    /// The address the member's key signs with (as in the forwarder's `setConfig`).
    #[schemars(with = "cresolver_core::schema::HexAddress")]
    pub address: Address,
    /// Where the member's endpoint listens, as the other members reach it (`http(s)://`).
    #[schemars(with = "String", extend("format" = "uri"))]
    pub url: Url,
}

/// The `[don]` section. Its timers are durations as text (`"4s"`); the older keys
/// holding whole milliseconds (`attempt_timeout_ms = 4000`) are still read (see
/// [`cresolver_core::schema::duration`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = duration::legacy_keys)]
pub struct DonConfig {
    /// The DON id, as in the forwarder's `setConfig`.
    pub don_id: u32,
    /// The config version, as in the forwarder's `setConfig`.
    pub config_version: u32,
    /// Faulty members tolerated; reports carry exactly f+1 signatures.
    pub f: u8,
    /// This member's endpoint for the other members (`host:port`).
    pub listen: String,
    /// Every member, this one included, in the same order on every member.
    pub members: Vec<MemberConfig>,
    /// The consensus timeout of round 0 (`"4s"`): how long members wait for the round's
    /// proposal; the prevote and precommit timeouts are half of it; each later round's
    /// timeouts are 50 % longer than round 0's times the round number, up to 60 s.
    /// Whole milliseconds count.
    #[serde(default = "default_attempt_timeout", with = "humantime_serde")]
    #[schemars(with = "duration::Text", extend("x-legacy-unit" = "ms"))]
    pub attempt_timeout: Duration,
    /// How long the leader waits for more observations once it holds 2f+1 (`"300ms"`).
    #[serde(default = "default_observation_grace", with = "humantime_serde")]
    #[schemars(with = "duration::Text", extend("x-legacy-unit" = "ms"))]
    pub observation_grace: Duration,
    /// A member that is not the transmitter waits its rank times this before it
    /// transmits an agreed report the chain has not seen (`"30s"`). Set it above the time
    /// your chain takes to include a transaction, or members pay for transmissions that
    /// revert with `AlreadyAttempted`.
    #[serde(default = "default_transmit_delay", with = "humantime_serde")]
    #[schemars(with = "duration::Text", extend("x-legacy-unit" = "ms"))]
    pub transmit_delay: Duration,
    /// Consensus rounds (leaders) one agreement call runs before the round is retried
    /// later; the consensus then resumes at the round it reached, from its log.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
}

fn default_attempt_timeout() -> Duration {
    Duration::from_secs(4)
}
fn default_observation_grace() -> Duration {
    Duration::from_millis(300)
}
fn default_transmit_delay() -> Duration {
    Duration::from_secs(30)
}
fn default_max_attempts() -> u32 {
    12
}

/// The most signers the KeystoneForwarder accepts.
pub const MAX_MEMBERS: usize = 31;

/// Why the `[don]` section fails its start-up checks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DonConfigError {
    /// `f` is 0.
    #[error(
        "[don] f = 0: the KeystoneForwarder needs f >= 1 (set f, and the forwarder's config, to at least 1)"
    )]
    ZeroF,
    /// Fewer than 3f+1 members.
    #[error(
        "[don] has {n} members for f = {f}: a DON needs at least 3f+1 = {need} (add members or lower f, here and in the forwarder's setConfig)"
    )]
    TooFew {
        /// Members listed.
        n: usize,
        /// Faulty members tolerated.
        f: u8,
        /// Members needed: 3f+1.
        need: usize,
    },
    /// More than [`MAX_MEMBERS`] members.
    #[error("[don] has {n} members: the KeystoneForwarder accepts at most {MAX_MEMBERS} signers")]
    TooMany {
        /// Members listed.
        n: usize,
    },
    /// A member's address is listed twice.
    #[error("[don] lists member {0} twice: every member appears once, with its own key")]
    Duplicate(Address),
    /// A member's address is the zero address.
    #[error("[don] lists the zero address as a member")]
    ZeroAddress,
    /// Two members share an endpoint URL.
    #[error("[don] lists the endpoint {0} for two members: each member listens on its own")]
    DuplicateUrl(String),
    /// This node's signer is not among the members.
    #[error(
        "this node's signer {0} is not one of [don].members: use the member's own key ([signer]) or add its address to members on every node (and to the forwarder's config)"
    )]
    NotAMember(Address),
    /// `listen` is not a socket address (`host:port`).
    #[error("[don].listen {0:?} is not host:port")]
    Listen(String),
    /// A member's URL is neither `http` nor `https`.
    #[error("[don] member url {0} is not http(s)")]
    Scheme(String),
    /// A timer (named) is under a millisecond or above its maximum (given).
    #[error("[don].{0} must be at least 1ms and at most {max}", max = humantime::format_duration(*.1))]
    Timer(&'static str, Duration),
    /// `max_attempts` is 0 or above its maximum (given).
    #[error("[don].max_attempts must be above 0 and at most {0}")]
    Attempts(u32),
}

impl DonConfig {
    /// The start-up checks: 3f+1 ≤ n ≤ 31, no member twice, `me` a member.
    pub fn validate(&self, me: Address) -> Result<(), DonConfigError> {
        if self.f == 0 {
            return Err(DonConfigError::ZeroF);
        }
        let n = self.members.len();
        let need = 3 * usize::from(self.f) + 1;
        if n < need {
            return Err(DonConfigError::TooFew { n, f: self.f, need });
        }
        if n > MAX_MEMBERS {
            return Err(DonConfigError::TooMany { n });
        }
        let (mut seen, mut urls) = (HashSet::new(), HashSet::new());
        for m in &self.members {
            if m.address == Address::ZERO {
                return Err(DonConfigError::ZeroAddress);
            }
            if !seen.insert(m.address) {
                return Err(DonConfigError::Duplicate(m.address));
            }
            if !matches!(m.url.scheme(), "http" | "https") {
                return Err(DonConfigError::Scheme(m.url.to_string()));
            }
            if !urls.insert(m.url.as_str().trim_end_matches('/').to_string()) {
                return Err(DonConfigError::DuplicateUrl(m.url.to_string()));
            }
        }
        if !seen.contains(&me) {
            return Err(DonConfigError::NotAMember(me));
        }
        if self.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(DonConfigError::Listen(self.listen.clone()));
        }
        const HOUR: Duration = Duration::from_secs(3_600);
        for (name, v, min) in [
            (
                "attempt_timeout",
                self.attempt_timeout,
                Duration::from_millis(1),
            ),
            // no grace at all is allowed: the leader proposes at 2f+1 observations
            ("observation_grace", self.observation_grace, Duration::ZERO),
            (
                "transmit_delay",
                self.transmit_delay,
                Duration::from_millis(1),
            ),
        ] {
            if v < min || v > HOUR {
                return Err(DonConfigError::Timer(name, HOUR));
            }
        }
        if self.max_attempts == 0 || self.max_attempts > 1_000 {
            return Err(DonConfigError::Attempts(1_000));
        }
        Ok(())
    }

    /// The members' addresses, in configuration order.
    pub fn addresses(&self) -> Vec<Address> {
        self.members.iter().map(|m| m.address).collect()
    }

    /// The member that leads `attempt` of an execution: the rotation starts at a member
    /// fixed by the execution id, so leadership spreads over rounds.
    pub fn leader(&self, execution_id: &alloy::primitives::B256, attempt: u32) -> Address {
        leader_of(&self.addresses(), execution_id, attempt)
    }
}

/// The leader of `attempt`: `members[(first 8 bytes of the execution id + attempt) mod n]`.
pub fn leader_of(
    members: &[Address],
    execution_id: &alloy::primitives::B256,
    attempt: u32,
) -> Address {
    if members.is_empty() {
        return Address::ZERO;
    }
    let mut start = [0u8; 8];
    start.copy_from_slice(&execution_id[..8]);
    let i = (u64::from_be_bytes(start) % members.len() as u64 + u64::from(attempt))
        % members.len() as u64;
    members[i as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(n: usize, f: u8) -> DonConfig {
        DonConfig {
            don_id: 1,
            config_version: 1,
            f,
            listen: "127.0.0.1:9500".into(),
            members: (1..=n)
                .map(|i| MemberConfig {
                    address: Address::repeat_byte(i as u8),
                    url: format!("http://127.0.0.1:{}", 9500 + i).parse().unwrap(),
                })
                .collect(),
            attempt_timeout: Duration::from_millis(1),
            observation_grace: Duration::from_millis(1),
            transmit_delay: Duration::from_millis(1),
            max_attempts: 1,
        }
    }

    #[test]
    fn start_up_refuses_what_the_forwarder_would() {
        let me = Address::repeat_byte(1);
        assert_eq!(cfg(4, 1).validate(me), Ok(()));
        assert_eq!(
            cfg(3, 1).validate(me),
            Err(DonConfigError::TooFew {
                n: 3,
                f: 1,
                need: 4
            })
        );
        assert_eq!(cfg(4, 0).validate(me), Err(DonConfigError::ZeroF));
        assert_eq!(
            cfg(32, 1).validate(me),
            Err(DonConfigError::TooMany { n: 32 })
        );
        assert_eq!(
            cfg(4, 1).validate(Address::repeat_byte(9)),
            Err(DonConfigError::NotAMember(Address::repeat_byte(9)))
        );
        let mut dup = cfg(4, 1);
        dup.members[3].address = dup.members[0].address;
        assert_eq!(dup.validate(me), Err(DonConfigError::Duplicate(me)));
        let mut url = cfg(4, 1);
        url.members[3].url = url.members[0].url.clone();
        assert!(matches!(
            url.validate(me),
            Err(DonConfigError::DuplicateUrl(_))
        ));
        let mut slow = cfg(4, 1);
        slow.transmit_delay = Duration::from_secs(3_601);
        let err = slow.validate(me).unwrap_err();
        assert_eq!(
            err.to_string(),
            "[don].transmit_delay must be at least 1ms and at most 1h"
        );
        let mut quick = cfg(4, 1);
        quick.observation_grace = Duration::ZERO;
        assert_eq!(quick.validate(me), Ok(()));
        quick.attempt_timeout = Duration::from_micros(500);
        assert!(matches!(
            quick.validate(me),
            Err(DonConfigError::Timer("attempt_timeout", _))
        ));
        quick.attempt_timeout = Duration::from_secs(1);
        quick.max_attempts = 0;
        assert_eq!(quick.validate(me), Err(DonConfigError::Attempts(1_000)));
    }

    #[test]
    fn timers_read_as_text_and_serialize_as_text() {
        let text = r#"{"don_id": 1, "config_version": 1, "f": 1, "listen": "127.0.0.1:9500",
            "members": [], "attempt_timeout": "800ms", "transmit_delay": "1m"}"#;
        let c: DonConfig = serde_json::from_str(text).unwrap();
        assert_eq!(c.attempt_timeout, Duration::from_millis(800));
        assert_eq!(c.observation_grace, Duration::from_millis(300));
        assert_eq!(c.transmit_delay, Duration::from_secs(60));
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["attempt_timeout"], "800ms");
        assert_eq!(v["transmit_delay"], "1m");
        let schema = serde_json::to_value(schemars::schema_for!(DonConfig)).unwrap();
        let props = &schema["properties"];
        assert_eq!(
            props["attempt_timeout_ms"]["x-legacy-of"],
            "attempt_timeout"
        );
        assert_eq!(props["transmit_delay_ms"]["deprecated"], true);
    }

    #[test]
    fn leadership_rotates_over_every_member() {
        let c = cfg(7, 2);
        let exec = alloy::primitives::B256::repeat_byte(0xab);
        let leaders: HashSet<Address> = (0..7).map(|a| c.leader(&exec, a)).collect();
        assert_eq!(leaders.len(), 7);
        assert_eq!(c.leader(&exec, 0), c.leader(&exec, 7));
    }
}
