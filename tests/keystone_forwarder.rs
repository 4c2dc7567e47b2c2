//! Chainlink's production KeystoneForwarder 1.0.0 (compiled from the unmodified source of
//! `@chainlink/contracts` 1.5.0) on anvil accepts a report signed the way cresolver's DON
//! signs it: `rawReport` from `report::build_raw_report`, the 96-byte context from
//! `don::report_context`, each member signing `don::forwarder_digest` with no prefix and
//! sending `r ‖ s ‖ v` with v = 0/1. With f = 1 and 4 configured signers: 2 signatures
//! resolve the market through `CREReceiver`, 1 or 3 are `InvalidSignatureCount`, a key
//! outside the config is `InvalidSigner`, the same report again is `AlreadyAttempted`.

use crate::common;

use alloy::primitives::{Address, B256, Bytes, U256, keccak256};
use alloy::signers::Signer;
use alloy::signers::local::PrivateKeySigner;
use common::chain::*;
use cresolver_chain::bindings::ICREsolverMarket;
use cresolver_chain::bindings::IKeystoneForwarder::IKeystoneForwarderErrors;
use cresolver_chain::bindings::artifacts::{CREReceiver, KeystoneForwarder};
use cresolver_chain::{RevertReason, decode_revert};
use cresolver_core::don::{execution_id, forwarder_digest, report_context};
use cresolver_core::encode_report;
use cresolver_core::report::{ExecutionHeader, ReportMetadata, build_raw_report};
use cresolver_store::RoundKey;

const DON_ID: u32 = 1;
const CONFIG_VERSION: u32 = 1;
const F: u8 = 1;

/// 65 bytes `r ‖ s ‖ v` with v the y parity (0 or 1), as the forwarder wants them (it adds 27).
async fn sign(key: &PrivateKeySigner, digest: B256) -> Bytes {
    let sig = key.sign_hash(&digest).await.unwrap();
    let mut out = Vec::with_capacity(65);
    out.extend_from_slice(&sig.r().to_be_bytes::<32>());
    out.extend_from_slice(&sig.s().to_be_bytes::<32>());
    out.push(u8::from(sig.v()));
    Bytes::from(out)
}

/// Simulates `report(...)` and returns the decoded revert.
async fn report_revert(
    fwd: &KeystoneForwarder::KeystoneForwarderInstance<alloy::providers::DynProvider>,
    receiver: Address,
    raw: &Bytes,
    ctx: &Bytes,
    sigs: Vec<Bytes>,
) -> RevertReason {
    let err = fwd
        .report(receiver, raw.clone(), ctx.clone(), sigs)
        .gas(3_000_000)
        .call()
        .await
        .expect_err("report should revert");
    let data = err
        .as_revert_data()
        .unwrap_or_else(|| panic!("no revert data in {err}"));
    decode_revert(&data)
}

/// The forwarder under test: Chainlink's KeystoneForwarder configured with a DON of four
/// members, and the `CREReceiver` it delivers to.
struct Forwarder {
    fwd: KeystoneForwarder::KeystoneForwarderInstance<alloy::providers::DynProvider>,
    receiver: Address,
    /// The DON: 4 anvil dev keys no worker or requester uses.
    don: Vec<PrivateKeySigner>,
    members: Vec<Address>,
    /// A key outside the forwarder's config.
    outsider: PrivateKeySigner,
}

/// The report the DON agrees on for a real request of the devnet's market, with its
/// context, its digest and every member's signature of it.
struct SignedReport {
    exec: B256,
    meta: ReportMetadata,
    header: ExecutionHeader,
    body: Bytes,
    raw: Bytes,
    ctx: Bytes,
    digest: B256,
    /// One signature per DON member, in the order of `Forwarder::don`.
    sigs: Vec<Bytes>,
}

/// Deploys the production forwarder with the DON's members and a receiver behind it, and
/// checks that they are the contracts and the wiring expected.
async fn deploy_forwarder(s: &MarketSetup) -> Forwarder {
    let dev = &s.dev;
    let don: Vec<PrivateKeySigner> = dev.signers[10..14].to_vec();
    let members: Vec<Address> = don.iter().map(|k| k.address()).collect();
    let outsider = dev.signers[15].clone();

    let forwarder = dev
        .deploy_keystone_forwarder(DON_ID, CONFIG_VERSION, F, members.clone())
        .await
        .unwrap();
    let receiver = dev.deploy_receiver(forwarder).await.unwrap();
    let fwd = KeystoneForwarder::new(forwarder, dev.provider.clone());
    assert_eq!(
        fwd.typeAndVersion().call().await.unwrap(),
        "KeystoneForwarder 1.0.0"
    );
    assert_eq!(fwd.owner().call().await.unwrap(), dev.accounts[0]);
    assert_eq!(
        CREReceiver::new(receiver, dev.provider.clone())
            .forwarder()
            .call()
            .await
            .unwrap(),
        forwarder
    );
    Forwarder {
        fwd,
        receiver,
        don,
        members,
        outsider,
    }
}

/// Requests the resolution of the devnet's market, builds the report the DON agrees on
/// for it, and has every member sign it; checks the digest against Chainlink's
/// definition and that each signature recovers to its signer.
async fn sign_report(s: &MarketSetup, f: &Forwarder) -> SignedReport {
    let dev = &s.dev;
    let request = dev.request_resolution(s.market_id).await.unwrap();
    let exec = execution_id(
        dev.chain_id,
        RoundKey::new(dev.contracts.market, s.market_id),
        request.transaction_hash,
    );
    let body = encode_report(
        s.market_id.into(),
        &s.workers,
        &[U256::from(100), U256::from(50)],
        &[70, 60, 50, 40, 30, 20],
        true,
    );
    let meta = ReportMetadata::new(
        B256::repeat_byte(0xab),
        "cresolver-resolution",
        dev.accounts[0],
        [0, 1],
    );
    let header = ExecutionHeader {
        version: 1,
        workflow_execution_id: exec,
        timestamp: 1_780_000_000,
        don_id: DON_ID,
        don_config_version: CONFIG_VERSION,
    };
    let raw = build_raw_report(&header, &meta, &body);
    let ctx = Bytes::copy_from_slice(&report_context(DON_ID, CONFIG_VERSION, F, &f.members));
    let digest = forwarder_digest(&raw, &ctx);

    // the digest is Chainlink's forge test's `keccak256(abi.encodePacked(keccak256(report),
    // reportContext))`, and each signature recovers to its signer (ecrecover(digest, v + 27, r, s))
    let mut packed = keccak256(&raw).to_vec();
    packed.extend_from_slice(&ctx);
    assert_eq!(digest, keccak256(&packed));
    let mut sigs = Vec::new();
    for key in &f.don {
        let sig = sign(key, digest).await;
        assert_eq!(sig.len(), 65);
        assert!(sig[64] <= 1, "v is the y parity");
        let parsed = alloy::primitives::Signature::from_raw(&sig).unwrap();
        assert_eq!(
            parsed.recover_address_from_prehash(&digest).unwrap(),
            key.address()
        );
        sigs.push(sig);
    }
    SignedReport {
        exec,
        meta,
        header,
        body,
        raw,
        ctx,
        digest,
        sigs,
    }
}

/// Every wrong way of sending the report reverts with its own error: too few or too
/// many signatures, a foreign signer, a duplicate, v as 27/28, another context, an
/// unknown config; the market stays unresolved.
async fn check_rejections(s: &MarketSetup, f: &Forwarder, r: &SignedReport) {
    let (fwd, receiver, raw, ctx, sigs) = (&f.fwd, f.receiver, &r.raw, &r.ctx, &r.sigs);
    // not f+1 signatures
    for n in [1usize, 3] {
        let reason = report_revert(fwd, receiver, raw, ctx, sigs[..n].to_vec()).await;
        match &reason {
            RevertReason::Forwarder(IKeystoneForwarderErrors::InvalidSignatureCount(x)) => {
                assert_eq!(
                    (x.expected, x.received),
                    (U256::from(2), U256::from(n)),
                    "{reason}"
                );
            }
            other => panic!("{n} signatures: want InvalidSignatureCount, got {other}"),
        }
        assert_eq!(reason.name(), "InvalidSignatureCount");
    }
    // a key outside the config
    let foreign = sign(&f.outsider, r.digest).await;
    let reason = report_revert(
        fwd,
        receiver,
        raw,
        ctx,
        vec![sigs[0].clone(), foreign.clone()],
    )
    .await;
    match &reason {
        RevertReason::Forwarder(IKeystoneForwarderErrors::InvalidSigner(x)) => {
            assert_eq!(x.signer, f.outsider.address(), "{reason}");
        }
        other => panic!("want InvalidSigner, got {other}"),
    }
    // one member twice
    let reason = report_revert(
        fwd,
        receiver,
        raw,
        ctx,
        vec![sigs[1].clone(), sigs[1].clone()],
    )
    .await;
    assert_eq!(reason.name(), "DuplicateSigner", "{reason}");
    check_foreign_context_rejections(s, f, r).await;
}

/// The rejections of signatures that do not match what the forwarder recovers: v as
/// 27/28, signatures over another context, a report of a config the forwarder does not
/// have; the market stays unresolved.
async fn check_foreign_context_rejections(s: &MarketSetup, f: &Forwarder, r: &SignedReport) {
    let (fwd, receiver, raw, ctx, sigs) = (&f.fwd, f.receiver, &r.raw, &r.ctx, &r.sigs);
    // v as 27/28 (an EIP-155-less Ethereum signature) does not recover: the forwarder adds 27
    let mut v27 = sigs[0].to_vec();
    v27[64] += 27;
    let reason = report_revert(
        fwd,
        receiver,
        raw,
        ctx,
        vec![Bytes::from(v27), sigs[1].clone()],
    )
    .await;
    assert_eq!(reason.name(), "InvalidSigner", "{reason}");
    // signatures over another context do not carry over
    let other_ctx =
        Bytes::copy_from_slice(&report_context(DON_ID, CONFIG_VERSION + 1, F, &f.members));
    let reason = report_revert(
        fwd,
        receiver,
        raw,
        &other_ctx,
        vec![sigs[0].clone(), sigs[1].clone()],
    )
    .await;
    assert_eq!(reason.name(), "InvalidSigner", "{reason}");
    // a config the forwarder does not have
    let mut unknown_version = r.header.clone();
    unknown_version.don_config_version = 2;
    let raw2 = build_raw_report(&unknown_version, &r.meta, &r.body);
    let reason = report_revert(fwd, receiver, &raw2, ctx, sigs[..2].to_vec()).await;
    assert_eq!(reason.name(), "InvalidConfig", "{reason}");
    assert!(
        !s.dev
            .market()
            .getMarket(s.market_id)
            .call()
            .await
            .unwrap()
            .resolved
    );
}

/// Sends the report with f+1 = 2 signatures, in any order, from a transmitter that is not
/// a DON member; checks that the receiver resolved the market and what the forwarder
/// records of the transmission. Returns the transmission id.
async fn transmit(s: &MarketSetup, f: &Forwarder, r: &SignedReport) -> B256 {
    let (dev, fwd, receiver, exec, meta) = (&s.dev, &f.fwd, f.receiver, r.exec, &r.meta);
    let transmitter = dev.accounts[5];
    let receipt = fwd
        .report(
            receiver,
            r.raw.clone(),
            r.ctx.clone(),
            vec![r.sigs[3].clone(), r.sigs[0].clone()],
        )
        .from(transmitter)
        .gas(3_000_000)
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert!(receipt.status());
    let processed = receipt
        .decoded_log::<KeystoneForwarder::ReportProcessed>()
        .unwrap();
    assert!(processed.data.result, "the receiver accepted the report");
    assert_eq!(
        (
            processed.data.receiver,
            processed.data.workflowExecutionId,
            processed.data.reportId
        ),
        (receiver, exec, meta.report_id)
    );
    let resolved = receipt
        .decoded_log::<ICREsolverMarket::MarketResolved>()
        .unwrap();
    assert_eq!(
        (resolved.data.marketId, resolved.data.resolver),
        (s.market_id, receiver)
    );
    let market = dev.market().getMarket(s.market_id).call().await.unwrap();
    assert!(market.resolved && market.resolution);

    let info = fwd
        .getTransmissionInfo(receiver, exec, meta.report_id)
        .call()
        .await
        .unwrap();
    assert_eq!(info.state, 1, "SUCCEEDED");
    assert!(info.success && !info.invalidReceiver);
    assert_eq!(info.transmitter, transmitter);
    assert_eq!(
        fwd.getTransmitter(receiver, exec, meta.report_id)
            .call()
            .await
            .unwrap(),
        transmitter
    );
    let id = fwd
        .getTransmissionId(receiver, exec, meta.report_id)
        .call()
        .await
        .unwrap();
    let mut id_preimage = receiver.to_vec();
    id_preimage.extend_from_slice(exec.as_slice());
    id_preimage.extend_from_slice(meta.report_id.as_slice());
    assert_eq!(
        (info.transmissionId, id),
        (keccak256(&id_preimage), keccak256(&id_preimage))
    );
    id
}

#[tokio::test]
async fn production_forwarder_accepts_f_plus_one_don_signatures() {
    let s = market_with_n_workers(2).await;
    let f = deploy_forwarder(&s).await;
    let r = sign_report(&s, &f).await;
    check_rejections(&s, &f, &r).await;
    let id = transmit(&s, &f, &r).await;

    // the same report again, even with other members' signatures
    for pair in [[0usize, 3], [1, 2]] {
        let reason = report_revert(
            &f.fwd,
            f.receiver,
            &r.raw,
            &r.ctx,
            pair.iter().map(|i| r.sigs[*i].clone()).collect(),
        )
        .await;
        match &reason {
            RevertReason::Forwarder(IKeystoneForwarderErrors::AlreadyAttempted(x)) => {
                assert_eq!(x.transmissionId, id, "{reason}");
            }
            other => panic!("want AlreadyAttempted, got {other}"),
        }
    }
    drop(f);
    s.dev.stop().await;
}
