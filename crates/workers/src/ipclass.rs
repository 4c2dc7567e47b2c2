//! Which IP addresses are public: the one rule the network guard (every connection to
//! a worker) and endpoint discovery (every registered URL) apply before a byte leaves.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether an address is publicly routable: not loopback, private, link-local (incl.
/// the 169.254.169.254 metadata service), CGNAT, unspecified, broadcast, multicast,
/// reserved, benchmarking or documentation; for IPv6 also not unique-local, link- or
/// site-local, discard-only, Teredo, and IPv4-mapped/-compatible, NAT64 or 6to4 forms
/// of a non-public IPv4 address.
pub fn is_public_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let refused = a == 0 // "this network", incl. 0.0.0.0
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64/10
        || (a == 169 && b == 254) // link-local, cloud metadata
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 168)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2) // TEST-NET-1
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast
        || (a == 198 && (b == 18 || b == 19)) // benchmarking 198.18/15
        || (a == 198 && b == 51 && c == 100) // TEST-NET-2
        || (a == 203 && b == 0 && c == 113) // TEST-NET-3
        || a >= 224; // multicast 224/4, reserved 240/4, broadcast
    !refused
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let embedded_v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    // ::/96 (unspecified, loopback, IPv4-compatible) and ::ffff:0:0/96 (IPv4-mapped).
    if s[..5] == [0; 5] && (s[5] == 0 || s[5] == 0xffff) {
        return match (s[5], s[6], s[7]) {
            (0, 0, 0 | 1) => false,
            _ => is_public_v4(embedded_v4(s[6], s[7])),
        };
    }
    // NAT64 64:ff9b::/96 and 64:ff9b:1::/48 carry an IPv4 address in the low bits.
    if s[0] == 0x64 && s[1] == 0xff9b && (s[2..6] == [0; 4] || s[2] == 1) {
        return is_public_v4(embedded_v4(s[6], s[7]));
    }
    // 6to4 2002::/16 carries one in bits 16..48.
    if s[0] == 0x2002 {
        return is_public_v4(embedded_v4(s[1], s[2]));
    }
    let refused = (s[0] & 0xfe00) == 0xfc00 // unique-local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site-local fec0::/10 (deprecated)
        || (s[0] & 0xff00) == 0xff00 // multicast
        || (s[0] == 0x100 && s[1..4] == [0; 3]) // discard-only 100::/64
        || (s[0] == 0x2001 && s[1] == 0) // Teredo 2001::/32
        || (s[0] == 0x2001 && s[1] == 2 && s[2] == 0) // benchmarking 2001:2::/48
        || (s[0] == 0x2001 && s[1] == 0xdb8) // documentation 2001:db8::/32
        || (s[0] & 0xfff0) == 0x3ff0; // documentation 3fff::/20
    !refused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_classification() {
        let public = [
            "8.8.8.8",
            "1.1.1.1",
            "100.63.255.255",
            "100.128.0.1",
            "172.15.0.1",
            "172.32.0.1",
            "192.169.0.1",
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ];
        for ip in public {
            assert!(is_public_ip(ip.parse().unwrap()), "{ip} should be public");
        }
        let private = [
            "127.0.0.1",
            "127.255.255.254",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "240.0.0.1",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "198.18.0.1",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "febf::1",
            "ff02::1",
            "2001:db8::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::1",
            "2001::1",
        ];
        for ip in private {
            assert!(
                !is_public_ip(ip.parse().unwrap()),
                "{ip} should not be public"
            );
        }
    }
}
