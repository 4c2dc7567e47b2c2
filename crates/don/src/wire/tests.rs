//! Unit tests of the wire format: signatures, the checks of a received message, the bounds
//! of a set and of a polka certificate.

use super::*;
use cresolver_core::MarketId;
use cresolver_core::don::{ObservedAnswer, Position, WorkerObservation};

fn obs(observer: Address) -> Observation {
    Observation {
        don_id: 1,
        config_version: 1,
        execution_id: B256::repeat_byte(7),
        market: Address::repeat_byte(9),
        market_id: MarketId::from(3u64),
        observer,
        timestamp: 1_700_000_000,
        workers: vec![WorkerObservation {
            address: Address::repeat_byte(0x11),
            answer: Some(ObservedAnswer {
                position: Position::Yes,
                confidence_ppm: 900_000,
                scores: [80, 70, 60],
            }),
            failure: None,
        }],
    }
}

fn env(sender: Address, body: Body) -> Envelope {
    Envelope {
        don_id: 1,
        config_version: 1,
        execution_id: B256::repeat_byte(7),
        market: Address::repeat_byte(9),
        market_id: MarketId::from(3u64),
        sender,
        body,
    }
}

#[test]
fn signing_gives_the_bytes_alloys_signer_gives() {
    use alloy::signers::SignerSync;
    for i in 0u8..16 {
        let k = PrivateKeySigner::random();
        let d = keccak256([i]);
        let ours = sign_digest(&k, &d).unwrap();
        let theirs = k.sign_hash_sync(&d).unwrap();
        assert_eq!(&ours[..32], &theirs.r().to_be_bytes::<32>()[..]);
        assert_eq!(&ours[32..64], &theirs.s().to_be_bytes::<32>()[..]);
        assert_eq!(ours[64], u8::from(theirs.v()));
    }
}

#[test]
fn signatures_use_v_0_or_1_and_recover() {
    let k = PrivateKeySigner::random();
    let d = B256::repeat_byte(1);
    let s = sign_digest(&k, &d).unwrap();
    assert_eq!(s.len(), 65);
    assert!(s[64] <= 1);
    assert_eq!(recover(&d, &s).unwrap(), k.address());
    assert!(recover(&d, &s[..64]).is_err());
}

#[test]
fn a_message_opens_only_for_its_member_and_its_don() {
    let (a, b, outsider) = (
        PrivateKeySigner::random(),
        PrivateKeySigner::random(),
        PrivateKeySigner::random(),
    );
    let members = [a.address(), b.address()];
    let o = sign_observation(obs(a.address()), &a).unwrap();
    let m = env(
        a.address(),
        Body::Observation {
            observation: o.clone(),
        },
    );
    let (body, sig) = seal(&m, &a).unwrap();
    assert_eq!(open(&body, Some(&sig), &members, 1, 1).unwrap(), m);
    // another DON, or another version
    assert!(matches!(
        open(&body, Some(&sig), &members, 2, 1),
        Err(WireError::OtherDon { .. })
    ));
    // a stranger's signature
    let (_, stranger) = seal(&m, &outsider).unwrap();
    assert_eq!(
        open(&body, Some(&stranger), &members, 1, 1),
        Err(WireError::NotAMember)
    );
    // b signs a's message: it names a
    let (_, by_b) = seal(&m, &b).unwrap();
    assert!(matches!(
        open(&body, Some(&by_b), &members, 1, 1),
        Err(WireError::WrongSender { .. })
    ));
    assert_eq!(
        open(&body, None, &members, 1, 1),
        Err(WireError::NoSignature)
    );
    // a's observation replayed into another execution
    let mut other = m.clone();
    other.execution_id = B256::repeat_byte(8);
    let (body2, sig2) = seal(&other, &a).unwrap();
    assert!(matches!(
        open(&body2, Some(&sig2), &members, 1, 1),
        Err(WireError::Unbound {
            field: "execution_id",
            ..
        })
    ));
    // a report signature with v = 27 (the forwarder adds 27 itself: it would fail there)
    let mut high_v = sign_digest(&a, &B256::repeat_byte(3)).unwrap().to_vec();
    high_v[64] += 27;
    let s27 = env(
        a.address(),
        Body::Decided {
            round: 0,
            observations: vec![],
            commits: vec![],
            report_signature: Some(Bytes::from(high_v)),
            agreed: false,
        },
    );
    let (body4, sig4) = seal(&s27, &a).unwrap();
    assert_eq!(
        open(&body4, Some(&sig4), &members, 1, 1),
        Err(WireError::BadSignature)
    );
    // b forwards an observation it forged in a's name
    let mut forged = o;
    forged.observation.workers[0].answer = None;
    let p = env(
        b.address(),
        Body::Proposal {
            round: 0,
            pol_round: None,
            observations: vec![forged],
            signature: Bytes::from(vec![0u8; 65]),
        },
    );
    let (body3, sig3) = seal(&p, &b).unwrap();
    assert!(matches!(
        open(&body3, Some(&sig3), &members, 1, 1),
        Err(WireError::Invalid { .. })
    ));
}

#[test]
fn a_set_holds_one_observation_per_member_at_most() {
    let (a, b) = (PrivateKeySigner::random(), PrivateKeySigner::random());
    let members = [a.address(), b.address()];
    let oa = sign_observation(obs(a.address()), &a).unwrap();
    let ob = sign_observation(obs(b.address()), &b).unwrap();
    let proposal = |observations: Vec<SignedObservation>| {
        let m = env(
            b.address(),
            Body::Proposal {
                round: 0,
                pol_round: None,
                observations,
                signature: Bytes::from(vec![0u8; 65]),
            },
        );
        let (body, sig) = seal(&m, &b).unwrap();
        open(&body, Some(&sig), &members, 1, 1)
    };
    assert!(proposal(vec![oa.clone(), ob.clone()]).is_ok());
    // b pads its set with copies of its own observation
    assert_eq!(
        proposal(vec![ob.clone(), oa.clone(), ob.clone()]),
        Err(WireError::TooMany)
    );
    assert_eq!(
        proposal(vec![ob.clone(), ob.clone()]),
        Err(WireError::DuplicateObserver(b.address()))
    );
}

#[test]
fn a_polka_opens_only_with_a_quorum_of_distinct_members_valid_prevotes() {
    let keys: Vec<PrivateKeySigner> = (0..4).map(|_| PrivateKeySigner::random()).collect();
    let members: Vec<Address> = keys.iter().map(PrivateKeySigner::address).collect();
    let (round, value) = (3, B256::repeat_byte(0x51));
    let digest =
        |r: u32, v: &B256| vote_digest(1, 1, &B256::repeat_byte(7), VoteKind::Prevote, r, Some(v));
    let prevote = |i: usize, r: u32, v: &B256| CommitVote {
        voter: members[i],
        signature: sign_digest(&keys[i], &digest(r, v)).unwrap(),
    };
    let open_polka = |prevotes: Vec<CommitVote>| {
        let m = env(
            members[0],
            Body::Polka {
                round,
                value,
                prevotes,
            },
        );
        let (body, sig) = seal(&m, &keys[0]).unwrap();
        open(&body, Some(&sig), &members, 1, 1)
    };
    let good: Vec<CommitVote> = (0..3).map(|i| prevote(i, round, &value)).collect();
    let m = open_polka(good.clone()).unwrap();
    assert_eq!(m.kind(), "polka");
    assert_eq!(
        open_polka(good[..2].to_vec()),
        Err(WireError::TooFewVotes { got: 2, need: 3 })
    );
    let mut twice = good[..2].to_vec();
    twice.push(good[1].clone());
    assert_eq!(
        open_polka(twice),
        Err(WireError::DuplicateVoter(members[1]))
    );
    // a prevote of another round, of another set, or naming another voter
    for bad in [
        prevote(2, round + 1, &value),
        prevote(2, round, &B256::repeat_byte(0x52)),
        CommitVote {
            voter: members[3],
            ..prevote(2, round, &value)
        },
    ] {
        let voter = bad.voter;
        let mut v = good[..2].to_vec();
        v.push(bad);
        assert_eq!(open_polka(v), Err(WireError::NotTheVoter(voter)));
    }
    let mut stranger = good.clone();
    stranger[2].voter = Address::repeat_byte(0x99);
    assert_eq!(open_polka(stranger), Err(WireError::NotAMember));
    let mut many = good.clone();
    many.extend(good.iter().cloned());
    assert_eq!(open_polka(many), Err(WireError::TooMany));
}

#[test]
fn a_body_type_a_member_does_not_know_is_refused_as_not_a_message() {
    // what a member of the release before polkas makes of a `polka` message: the same
    // refusal as of any unknown body type (403 at its endpoint)
    let a = PrivateKeySigner::random();
    let m = env(
        a.address(),
        Body::Vote {
            round: 0,
            kind: VoteKind::Prevote,
            value: None,
            signature: Bytes::from(vec![0u8; 65]),
        },
    );
    let json = serde_json::to_string(&m)
        .unwrap()
        .replace(r#""type":"vote""#, r#""type":"from_a_later_release""#);
    let (_, sig) = seal(&m, &a).unwrap();
    assert!(matches!(
        open(json.as_bytes(), Some(&sig), &[a.address()], 1, 1),
        Err(WireError::Json(_))
    ));
}

#[test]
fn the_market_id_travels_as_the_u256_hex_string_it_always_was() {
    // the wire of the version before MarketId: `market_id` was a U256
    let o = obs(Address::repeat_byte(1));
    let v = serde_json::to_value(&o).unwrap();
    assert_eq!(v["market_id"], "0x3");
    assert_eq!(
        v["market_id"],
        serde_json::to_value(alloy::primitives::U256::from(3u64)).unwrap()
    );
    let back: Observation = serde_json::from_value(v).unwrap();
    assert_eq!(back, o);
    let e = env(
        Address::repeat_byte(2),
        Body::Observation {
            observation: sign_observation(o, &PrivateKeySigner::random()).unwrap(),
        },
    );
    let v = serde_json::to_value(&e).unwrap();
    assert_eq!(v["market_id"], "0x3");
    let back: Envelope = serde_json::from_value(v).unwrap();
    assert_eq!(back, e);
}
