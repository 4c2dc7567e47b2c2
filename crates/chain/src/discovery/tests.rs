//! Tests of discovery: endpoint validation, registration parsing, data URIs and token URI fetches.

use super::*;
use serde_json::json;

fn cfg() -> DiscoveryConfig {
    DiscoveryConfig::default()
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

async fn fetch(uri: &str) -> Result<Vec<u8>, DiscardReason> {
    fetch_token_uri(uri, &cfg(), &reqwest::Client::new()).await
}

#[tokio::test]
async fn endpoint_validation() {
    for (url, allow) in [
        ("ftp://example.com", true),
        ("file:///etc/passwd", true),
        ("javascript:alert(1)", true),
        ("not a url", true),
        ("https://user:pw@example.com", true),
        ("http://127.0.0.1:8080", false),
        ("http://localhost:8080", false),
        ("http://api.localhost", false),
        ("http://metadata.google.internal/computeMetadata/v1/", false),
        ("http://169.254.169.254/latest/meta-data/", false),
        ("http://[::1]:80", false),
        ("http://[::ffff:127.0.0.1]/", false),
        ("http://[fd00::1]/", false),
        ("http://2130706433/", false), // 127.0.0.1 as a number
        ("http://0x7f.0.0.1/", false), // and in hex
        ("http://10.0.0.1/", false),
        ("https://no-such-host.invalid/", false),
    ] {
        assert!(
            matches!(
                validate_endpoint(url, allow).await,
                Err(DiscardReason::RefusedEndpoint { .. })
            ),
            "{url} should be refused (allow_private={allow})"
        );
    }
    assert_eq!(
        validate_endpoint("http://127.0.0.1:8080", true)
            .await
            .unwrap()
            .as_str(),
        "http://127.0.0.1:8080/"
    );
    assert!(
        validate_endpoint("https://8.8.8.8/agent", false)
            .await
            .is_ok()
    );
    assert!(
        validate_endpoint("http://[2606:4700:4700::1111]/", false)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn data_uri_base64_and_plain() {
    let doc = r#"{"name":"a","services":[]}"#;
    assert_eq!(
        fetch(&format!("data:application/json;base64,{}", b64(doc)))
            .await
            .unwrap(),
        doc.as_bytes()
    );
    // Media-type parameters, unpadded base64, upper-case scheme.
    let unpadded = b64("{}").trim_end_matches('=').to_string();
    assert_eq!(
        fetch(&format!(
            "DATA:application/json;charset=utf-8;base64,{unpadded}"
        ))
        .await
        .unwrap(),
        b"{}"
    );
    // Percent-encoded plain data, and a +json media type.
    assert_eq!(
        fetch("data:application/ld+json,%7B%22name%22%3A%20%22x%22%7D")
            .await
            .unwrap(),
        br#"{"name": "x"}"#
    );
    assert_eq!(
        fetch(r#"data:text/json,{"a":1}"#).await.unwrap(),
        br#"{"a":1}"#
    );
}

#[tokio::test]
async fn bad_data_uris() {
    assert!(matches!(
        fetch("data:application/json;base64,@@not base64@@").await,
        Err(DiscardReason::InvalidMetadata { .. })
    ));
    assert!(matches!(
        fetch("data:text/plain,{}").await,
        Err(DiscardReason::InvalidMetadata { .. })
    ));
    assert!(matches!(
        fetch("data:application/json").await,
        Err(DiscardReason::InvalidMetadata { .. })
    ));
    let big = format!(
        "data:application/json;base64,{}",
        b64(&"x".repeat(cfg().max_metadata_bytes + 1))
    );
    assert!(
        matches!(fetch(&big).await, Err(DiscardReason::FetchFailed { detail }) if detail.contains("larger than"))
    );
}

#[tokio::test]
async fn refused_token_uri_schemes() {
    for uri in [
        "ftp://example.com/a.json",
        "file:///etc/passwd",
        "ar://abc",
        "no-scheme",
        "https://user:pw@example.com/a.json",
    ] {
        assert!(
            matches!(fetch(uri).await, Err(DiscardReason::FetchFailed { .. })),
            "{uri}"
        );
    }
    // Plain http only with private endpoints allowed; loopback https refused.
    assert!(
        matches!(fetch("http://example.com/a.json").await, Err(DiscardReason::FetchFailed { detail }) if detail.contains("http://"))
    );
    assert!(
        matches!(fetch("https://127.0.0.1/a.json").await, Err(DiscardReason::FetchFailed { detail }) if detail.contains("non-public"))
    );
}

#[test]
fn ipfs_urls() {
    let gw = Url::parse("https://gw.example/ipfs/").unwrap();
    let cid = "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi";
    assert_eq!(
        ipfs_url(&format!("ipfs://{cid}"), &gw).unwrap().as_str(),
        format!("https://gw.example/ipfs/{cid}")
    );
    assert_eq!(
        ipfs_url(&format!("ipfs://ipfs/{cid}/agent.json"), &gw)
            .unwrap()
            .as_str(),
        format!("https://gw.example/ipfs/{cid}/agent.json")
    );
    // a gateway's own query (its access key) is kept, the URI's query after it
    let keyed = Url::parse("https://gw.example/ipfs/?key=k1").unwrap();
    assert_eq!(
        ipfs_url(&format!("ipfs://{cid}"), &keyed).unwrap().as_str(),
        format!("https://gw.example/ipfs/{cid}?key=k1")
    );
    assert_eq!(
        ipfs_url(&format!("ipfs://{cid}/a.json?v=2"), &keyed)
            .unwrap()
            .as_str(),
        format!("https://gw.example/ipfs/{cid}/a.json?key=k1&v=2")
    );
    let no_slash = Url::parse("https://gw.example/ipfs").unwrap();
    assert_eq!(
        ipfs_url(&format!("ipfs://{cid}/a"), &no_slash)
            .unwrap()
            .as_str(),
        format!("https://gw.example/ipfs/{cid}/a")
    );
    for bad in [
        "ipfs://",
        "ipfs://../x",
        &format!("ipfs://{cid}/../../admin"),
        &format!("ipfs://{cid}/%2e%2e/admin"),
        "ipfs://a@b/x",
    ] {
        assert!(ipfs_url(bad, &gw).is_err(), "{bad}");
    }
}

#[test]
fn registration_services_and_legacy_endpoints() {
    let reg = parse_registration(
        json!({
            "type": "https://eips.ethereum.org/EIPS/eip-8004#registration-v1",
            "name": "Agent",
            "services": [
                {"name": "wallet", "endpoint": "eip155:1:0x0"},
                {"name": "A2A", "endpoint": "https://agent.example", "protocol": "cresolver"}
            ],
            "x402Support": false,
            "unknown": {"nested": [1, 2]}
        })
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    assert!(reg.active);
    assert_eq!(reg.name.as_deref(), Some("Agent"));
    assert_eq!(
        worker_service(&reg),
        Some(WorkerService {
            kind: ProtocolKind::A2a,
            endpoint: "https://agent.example".to_string(),
            did: None
        })
    );

    let legacy = parse_registration(
        br#"{"name":"Old","endpoints":[{"name":"a2a","endpoint":"https://old.example"}]}"#,
    )
    .unwrap();
    assert_eq!(
        worker_service(&legacy).map(|s| (s.kind, s.endpoint)),
        Some((ProtocolKind::A2a, "https://old.example".to_string()))
    );
}

#[test]
fn a2a_service_is_case_insensitive_and_needs_an_endpoint() {
    let reg = parse_registration(
        br#"{"services":[
                {"name":"A2A","endpoint":""},
                {"name":"a2A","endpoint":42},
                "junk",
                {"endpoint":"https://nameless.example"},
                {"name":"a2a","endpoint":"https://second.example","protocol":"x"},
                {"name":"A2A","endpoint":"https://third.example"}
            ]}"#,
    )
    .unwrap();
    assert_eq!(
        worker_service(&reg).map(|s| s.endpoint),
        Some("https://second.example".to_string())
    );
    let none =
        parse_registration(br#"{"services":[{"name":"MCP","endpoint":"https://m"}]}"#).unwrap();
    assert_eq!(worker_service(&none), None);
    // another protocol, chosen by `protocol` or by name; A2A preferred when listed
    let other = parse_registration(
            br#"{"services":[
                {"name":"MCP","endpoint":"https://m"},
                {"name":"predictions","endpoint":"https://f.example/hook","protocol":"Factagora-BYOA"},
                {"name":"Agora","endpoint":"https://relay.example","did":"did:key:z6Mk"}
            ]}"#,
        )
        .unwrap();
    assert_eq!(
        worker_service(&other),
        Some(WorkerService {
            kind: ProtocolKind::Factagora,
            endpoint: "https://f.example/hook".to_string(),
            did: None
        })
    );
    let agora = parse_registration(
        br#"{"services":[{"name":"Agora","endpoint":"https://relay.example","did":"did:key:z6Mk"},
                {"name":"A2A","endpoint":"https://a.example"}]}"#,
    )
    .unwrap();
    assert_eq!(worker_service(&agora).unwrap().kind, ProtocolKind::A2a);
    let agora = parse_registration(
            br#"{"services":[{"name":"Agora","endpoint":"https://relay.example","did":"did:key:z6Mk"}]}"#,
        )
        .unwrap();
    assert_eq!(
        worker_service(&agora).unwrap().did.as_deref(),
        Some("did:key:z6Mk")
    );
    let no_list = parse_registration(br#"{"services":"nope"}"#).unwrap();
    assert!(no_list.services.is_empty());
}

#[test]
fn inactive_and_invalid_registrations() {
    assert!(!parse_registration(br#"{"active":false}"#).unwrap().active);
    assert!(!parse_registration(br#"{"active":"False"}"#).unwrap().active);
    assert!(parse_registration(br#"{"active":null}"#).unwrap().active);
    for bad in [
        &b"not json"[..],
        b"[1,2]",
        b"\"str\"",
        b"",
        br#"{"active":1}"#,
    ] {
        assert!(
            matches!(
                parse_registration(bad),
                Err(DiscardReason::InvalidMetadata { .. })
            ),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn discard_reasons_serialize_tagged() {
    let r = DiscardReason::FetchFailed {
        detail: "HTTP 404".into(),
    };
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        json!({"kind": "fetch_failed", "detail": "HTTP 404"})
    );
    assert_eq!(
        serde_json::to_value(DiscardReason::NoA2aEndpoint).unwrap(),
        json!({"kind": "no_a2a_endpoint"})
    );
    assert_eq!(
        r.to_string(),
        "fetching the registration file failed: HTTP 404"
    );
}

#[test]
fn slots_follow_discovery() {
    let found = vec![
        DiscoveredWorker {
            address: Address::repeat_byte(1),
            agent_id: U256::from(1),
            name: Some("a".into()),
            endpoint: Ok(Url::parse("http://127.0.0.1:1").unwrap()),
            protocol: Some(ProtocolKind::A2a),
            did: None,
        },
        DiscoveredWorker {
            address: Address::repeat_byte(2),
            agent_id: U256::from(2),
            name: None,
            endpoint: Err(DiscardReason::NoTokenUri),
            protocol: None,
            did: None,
        },
        DiscoveredWorker {
            address: Address::repeat_byte(3),
            agent_id: U256::from(3),
            name: None,
            endpoint: Ok(Url::parse("http://127.0.0.1:3").unwrap()),
            protocol: Some(ProtocolKind::Chorus),
            did: None,
        },
    ];
    let slots = to_slots(&found, &ProtocolSet::a2a_only());
    assert_eq!(slots.len(), 3);
    assert_eq!(slots[0].address, Address::repeat_byte(1));
    assert_eq!(
        slots[0].target.as_ref().unwrap().endpoint.as_str(),
        "http://127.0.0.1:1/"
    );
    assert_eq!(
        slots[1].target.as_ref().unwrap_err(),
        "agent has no token URI"
    );
    // a protocol the node does not speak: not called, and the reason says so
    assert!(
        slots[2]
            .target
            .as_ref()
            .unwrap_err()
            .contains("chorus, which this node has not enabled")
    );
}
