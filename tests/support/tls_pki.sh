#!/usr/bin/env bash
# tests/support/tls_pki.sh OUTDIR
# Makes a throwaway PKI for the TLS end-to-end tests in OUTDIR (created if missing), new keys on
# every run so that no private key is ever committed:
#   ca.pem/ca.key                 the test CA (CN=tollgate-test-ca)
#   server.pem/server.key         signed by ca: localhost, 127.0.0.1, ::1 (serverAuth)
#   wrongname.pem/wrongname.key   signed by ca: evil.example only (host name checks must refuse it)
#   expired.pem/expired.key       signed by ca: localhost, 127.0.0.1, valid only in January 2020
#   other-ca.pem/other-ca.key     a second CA that nobody trusts
#   unknownca.pem/unknownca.key   signed by other-ca: localhost, 127.0.0.1
#   client.pem/client.key         signed by ca: CN=tollgate-client (clientAuth)
#   cnonly.pem/cnonly.key         signed by ca: CN=localhost and no subjectAltName (refused: names
#                                 are checked against subjectAltNames only)
# All keys are EC P-256 (fast to make), every .key is mode 600. Silent on success; on failure the
# failing openssl command's output goes to stderr.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
out=$1
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "$out/.pki.XXXXXX")
trap 'rm -rf "$work"' EXIT

# openssl is chatty on stderr even when it succeeds ("Using configuration from", "Signature ok"):
# keep its output and show it only when the command fails.
run() {
  if ! "$@" >"$work/log" 2>&1; then
    echo "tls_pki.sh: failed: $*" >&2
    cat "$work/log" >&2
    exit 1
  fi
}

# One config for every step: an explicit file keeps the system's openssl.cnf (which may add
# extensions or prompts of its own) out of the certificates.
cat >"$work/openssl.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
[dn]

[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = DNS:localhost, IP:127.0.0.1, IP:::1

[wrongname_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = DNS:evil.example

[localhost_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = DNS:localhost, IP:127.0.0.1

[cnonly_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid

[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid

# Only for the expired certificate: "openssl ca" is the one OpenSSL 3.0 command that takes an
# explicit start date.
[ca]
default_ca = test_ca
[test_ca]
database = $work/index.txt
new_certs_dir = $work
serial = $work/serial
default_md = sha256
policy = any_name
unique_subject = no
copy_extensions = none
email_in_dn = no
[any_name]
commonName = supplied
EOF
: >"$work/index.txt"
printf '%s\n' "$(printf '%04X%04X' $RANDOM $RANDOM)" >"$work/serial"

cnf=(-config "$work/openssl.cnf")
newkey=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)

# A self-signed CA: NAME CN
make_ca() {
  run openssl req "${cnf[@]}" -x509 "${newkey[@]}" -sha256 -days 30 -subj "/CN=$2" -extensions ca_ext \
    -keyout "$out/$1.key" -out "$out/$1.pem"
}

# A key and a signing request: NAME CN
make_csr() {
  run openssl req "${cnf[@]}" -new "${newkey[@]}" -subj "/CN=$2" -keyout "$out/$1.key" -out "$work/$1.csr"
}

# A certificate valid from now: NAME ISSUER EXTENSION_SECTION
sign() {
  run openssl x509 -req -in "$work/$1.csr" -CA "$out/$2.pem" -CAkey "$out/$2.key" \
    -set_serial "$((RANDOM * 32768 + RANDOM))" -sha256 -days 30 \
    -extfile "$work/openssl.cnf" -extensions "$3" -out "$out/$1.pem"
}

make_ca ca tollgate-test-ca
make_ca other-ca tollgate-other-ca

make_csr server localhost
sign server ca server_ext

make_csr wrongname evil.example
sign wrongname ca wrongname_ext

make_csr unknownca localhost
sign unknownca other-ca localhost_ext

make_csr client tollgate-client
sign client ca client_ext

make_csr cnonly localhost
sign cnonly ca cnonly_ext

make_csr expired localhost
run openssl ca "${cnf[@]}" -batch -notext -cert "$out/ca.pem" -keyfile "$out/ca.key" \
  -startdate 20200101000000Z -enddate 20200201000000Z \
  -extfile "$work/openssl.cnf" -extensions localhost_ext \
  -in "$work/expired.csr" -out "$out/expired.pem"

chmod 600 "$out"/*.key
chmod 644 "$out"/*.pem
