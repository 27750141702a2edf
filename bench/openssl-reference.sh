#!/usr/bin/env bash
# openssl-reference.sh ALG DIR
#
# The openssl CLI doing by hand what `certgen --local DIR` does with the default envoy-gateway
# profile, so bench/local can time the two against each other. ALG is `ecdsa-p256` or
# `rsa-2048` (the profile's keyAlgorithm names). DIR must exist and be empty; it ends up with
#
#   DIR/envoy-gateway-ca/{ca.crt,tls.crt,tls.key}   self-signed CA, pathlen 0
#   DIR/envoy-gateway/{ca.crt,tls.crt,tls.key}      leaves signed by that CA, with the
#   DIR/envoy/{ca.crt,tls.crt,tls.key}              profile's subject, SANs and
#   DIR/envoy-rate-limit/{ca.crt,tls.crt,tls.key}   serverAuth+clientAuth EKUs
#   DIR/envoy-oidc-hmac/hmac-secret                 32 random bytes
#
# Keys are unencrypted PKCS#8 PEM ("BEGIN PRIVATE KEY"), certificates PEM, SHA-256 signatures,
# CA valid 1825 days, leaves 365 days, namespace envoy-gateway-system, as the profile says. The
# extensions and file modes are the ones certgen writes: CA keyUsage digitalSignature,
# keyCertSign, cRLSign; leaf keyUsage digitalSignature (plus keyEncipherment for RSA), SKI/AKI;
# directories 0700, keys and hmac-secret 0600, certificates 0644.
#
# It is written to be as fast as the openssl CLI allows, so the comparison is not padded: each
# leaf is one `openssl req -x509 -CA` call (key, request and CA-signed certificate in one
# process; OpenSSL >= 3.0) rather than the classic genpkey + req + x509 trio, so the whole run
# is 5 openssl processes and 1 mkdir (ca.crt copies are made with bash builtins). The
# extensions come from the small config below, not from the system openssl.cnf, so no v3_ca
# defaults leak into the leaves.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 ecdsa-p256|rsa-2048 DIR" >&2
  exit 2
fi
alg=$1
dir=$2

case "$alg" in
  ecdsa-p256 | p256 | P-256)
    newkey=(-newkey ec -pkeyopt ec_paramgen_curve:P-256)
    export CERTGEN_REF_LEAF_KU=digitalSignature
    ;;
  rsa-2048 | rsa | RSA-2048)
    newkey=(-newkey rsa:2048)
    export CERTGEN_REF_LEAF_KU=digitalSignature,keyEncipherment
    ;;
  *)
    echo "$0: unknown ALG '$alg' (ecdsa-p256 or rsa-2048)" >&2
    exit 2
    ;;
esac

ns=envoy-gateway-system
domain=cluster.local
umask 022 # certificates 0644; openssl writes keys 0600 itself; directories, hmac-secret: below

# Given to every openssl call on standard input (a here-string: no temp file, no extra process).
# shellcheck disable=SC2016 # $ENV::NAME is openssl's syntax, for openssl to expand
cnf='[req]
distinguished_name = dn
prompt = no
[dn]
[ca_ext]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, digitalSignature, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[leaf_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, $ENV::CERTGEN_REF_LEAF_KU
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = $ENV::CERTGEN_REF_SAN
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid'
export CERTGEN_REF_SAN=DNS:unused # the config is parsed for the CA too

ca=$dir/envoy-gateway-ca
mkdir -m 700 "$ca" "$dir/envoy-gateway" "$dir/envoy" "$dir/envoy-rate-limit" "$dir/envoy-oidc-hmac"
openssl req -x509 -new "${newkey[@]}" -noenc -sha256 -days 1825 \
  -config /dev/stdin -extensions ca_ext -subj /CN=envoy-gateway \
  -keyout "$ca/tls.key" -out "$ca/tls.crt" 2>/dev/null <<<"$cnf"
IFS= read -r -d '' ca_pem <"$ca/tls.crt" || true # builtins copy ca.crt: no cp processes
printf '%s' "$ca_pem" >"$ca/ca.crt"

# leaf NAME CN SAN
leaf() {
  local out=$dir/$1
  CERTGEN_REF_SAN=$3 openssl req -x509 -new "${newkey[@]}" -noenc -sha256 -days 365 \
    -config /dev/stdin -extensions leaf_ext -subj "/CN=$2" \
    -CA "$ca/tls.crt" -CAkey "$ca/tls.key" \
    -keyout "$out/tls.key" -out "$out/tls.crt" 2>/dev/null <<<"$cnf"
  printf '%s' "$ca_pem" >"$out/ca.crt"
}

leaf envoy-gateway envoy-gateway \
  "DNS:envoy-gateway,DNS:envoy-gateway.$ns,DNS:envoy-gateway.$ns.svc,DNS:envoy-gateway.$ns.svc.$domain"
leaf envoy '*' "DNS:*.$ns"
leaf envoy-rate-limit '*' "DNS:*.$ns"

umask 077
openssl rand -out "$dir/envoy-oidc-hmac/hmac-secret" 32
