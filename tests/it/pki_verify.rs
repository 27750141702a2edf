//! What certgen issues, checked by rustls-webpki (a verifier certgen did not write) at fixed
//! times: chain to the bundle, EKUs, SANs, and leaves never outliving their CA.

use std::time::Duration;

use certgen::pki::{CaSpec, KeyAlgorithm, LeafSpec, Usages, issue_ca, issue_leaf};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use time::OffsetDateTime;
use time::macros::datetime;
use webpki::{EndEntityCert, KeyUsage, anchor_from_trusted_cert};

const NOW: OffsetDateTime = datetime!(2026-06-01 12:00 UTC);
const DAY: Duration = Duration::from_secs(86_400);

const ALGORITHMS: [KeyAlgorithm; 6] = [
    KeyAlgorithm::EcdsaP256,
    KeyAlgorithm::EcdsaP384,
    KeyAlgorithm::Ed25519,
    KeyAlgorithm::Rsa2048,
    KeyAlgorithm::Rsa3072,
    KeyAlgorithm::Rsa4096,
];

fn at(t: OffsetDateTime) -> UnixTime {
    UnixTime::since_unix_epoch(Duration::from_secs(t.unix_timestamp() as u64))
}

fn leaf_spec(alg: KeyAlgorithm, usages: Usages) -> LeafSpec {
    LeafSpec {
        common_name: "envoy-gateway".into(),
        dns_names: vec!["envoy-gateway.ns.svc".into(), "*.ns.example".into()],
        ip_addresses: vec!["127.0.0.1".parse().unwrap()],
        usages,
        validity: DAY * 365,
        key_algorithm: alg,
    }
}

fn verify(
    ca: &[u8],
    leaf: &[u8],
    time: OffsetDateTime,
    usage: KeyUsage,
) -> Result<(), webpki::Error> {
    let ca = CertificateDer::from(ca.to_vec());
    let anchors = [anchor_from_trusted_cert(&ca)?.to_owned()];
    let leaf = CertificateDer::from(leaf.to_vec());
    let ee = EndEntityCert::try_from(&leaf)?;
    ee.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        &anchors,
        &[],
        at(time),
        usage,
        None,
        None,
    )
    .map(|_| ())
}

#[test]
fn every_algorithm_issues_chains_that_webpki_accepts_for_both_usages() {
    let mut serials = std::collections::HashSet::new();
    for alg in ALGORITHMS {
        let ca_spec = CaSpec {
            common_name: "ca".into(),
            validity: DAY * 1825,
            key_algorithm: alg,
        };
        let (ca, _) = issue_ca(&ca_spec, NOW).unwrap();
        let issued = issue_leaf(
            &leaf_spec(
                alg,
                Usages {
                    server: true,
                    client: true,
                },
            ),
            &ca,
            NOW,
        )
        .unwrap();
        let later = NOW + time::Duration::days(10);
        verify(
            ca.cert.der(),
            issued.cert.der(),
            later,
            KeyUsage::server_auth(),
        )
        .unwrap_or_else(|e| panic!("{alg}: {e:?}"));
        verify(
            ca.cert.der(),
            issued.cert.der(),
            later,
            KeyUsage::client_auth(),
        )
        .unwrap_or_else(|e| panic!("{alg}: {e:?}"));
        let leaf = CertificateDer::from(issued.cert.der().to_vec());
        let ee = EndEntityCert::try_from(&leaf).unwrap();
        for name in ["envoy-gateway.ns.svc", "anything.ns.example", "127.0.0.1"] {
            let sn = ServerName::try_from(name).unwrap();
            ee.verify_is_valid_for_subject_name(&sn)
                .unwrap_or_else(|e| panic!("{alg} {name}: {e:?}"));
        }
        let wrong = ServerName::try_from("envoy-gateway.other.svc").unwrap();
        assert!(
            ee.verify_is_valid_for_subject_name(&wrong).is_err(),
            "{alg}"
        );
        // 128 random bits, DER-encoded as a positive INTEGER (a leading 00 when the top bit is set).
        let serial = issued.cert.serial.trim_start_matches("00");
        assert!(
            (16..=32).contains(&serial.len()),
            "{alg}: serial {serial} is not 128 bits"
        );
        assert!(serials.insert(serial.to_string()), "{alg}: serial repeated");
        assert!(
            issued
                .key
                .expose()
                .starts_with("-----BEGIN PRIVATE KEY-----"),
            "{alg}: PKCS#8"
        );
    }
}

#[test]
fn a_server_only_leaf_is_rejected_for_client_auth() {
    let ca_spec = CaSpec {
        common_name: "ca".into(),
        validity: DAY * 1825,
        key_algorithm: KeyAlgorithm::EcdsaP256,
    };
    let (ca, _) = issue_ca(&ca_spec, NOW).unwrap();
    let server_only = issue_leaf(
        &leaf_spec(
            KeyAlgorithm::EcdsaP256,
            Usages {
                server: true,
                client: false,
            },
        ),
        &ca,
        NOW,
    )
    .unwrap();
    verify(
        ca.cert.der(),
        server_only.cert.der(),
        NOW,
        KeyUsage::server_auth(),
    )
    .unwrap();
    assert!(
        verify(
            ca.cert.der(),
            server_only.cert.der(),
            NOW,
            KeyUsage::client_auth()
        )
        .is_err()
    );
}

#[test]
fn a_leaf_never_outlives_its_ca_and_fails_after_it() {
    let ca_spec = CaSpec {
        common_name: "ca".into(),
        validity: DAY * 100,
        key_algorithm: KeyAlgorithm::EcdsaP256,
    };
    let (ca, _) = issue_ca(&ca_spec, NOW).unwrap();
    let issued = issue_leaf(
        &leaf_spec(
            KeyAlgorithm::EcdsaP256,
            Usages {
                server: true,
                client: true,
            },
        ),
        &ca,
        NOW,
    )
    .unwrap();
    assert_eq!(
        issued.cert.not_after, ca.cert.not_after,
        "clipped to the CA"
    );
    verify(
        ca.cert.der(),
        issued.cert.der(),
        NOW + time::Duration::days(99),
        KeyUsage::server_auth(),
    )
    .unwrap();
    assert!(
        verify(
            ca.cert.der(),
            issued.cert.der(),
            NOW + time::Duration::days(101),
            KeyUsage::server_auth()
        )
        .is_err()
    );
    assert!(
        issue_leaf(
            &leaf_spec(KeyAlgorithm::EcdsaP256, Usages::default()),
            &ca,
            NOW + time::Duration::days(101)
        )
        .is_err()
    );
}

#[test]
fn a_leaf_is_never_a_ca_and_cannot_sign() {
    let ca_spec = CaSpec {
        common_name: "ca".into(),
        validity: DAY * 100,
        key_algorithm: KeyAlgorithm::EcdsaP256,
    };
    let (ca, _) = issue_ca(&ca_spec, NOW).unwrap();
    let issued = issue_leaf(
        &leaf_spec(
            KeyAlgorithm::EcdsaP256,
            Usages {
                server: true,
                client: true,
            },
        ),
        &ca,
        NOW,
    )
    .unwrap();
    assert!(!issued.cert.is_ca);
    // webpki refuses a leaf as a trust anchor for another leaf it "signed"? It cannot sign:
    // the leaf's key usage lacks keyCertSign. Check the extension directly.
    let (_, x509) = x509_parser::parse_x509_certificate(issued.cert.der()).unwrap();
    let ku = x509.key_usage().unwrap().unwrap().value;
    assert!(!ku.key_cert_sign());
    let (_, ca509) = x509_parser::parse_x509_certificate(ca.cert.der()).unwrap();
    let bc = ca509.basic_constraints().unwrap().unwrap().value;
    assert_eq!((bc.ca, bc.path_len_constraint), (true, Some(0)));
}
