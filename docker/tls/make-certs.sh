#!/usr/bin/env bash
# Throwaway TLS material for a ZooKeeper ensemble that requires TLS and the
# stunnel tunnels beside the zkresp sidecars (README, "TLS to ZooKeeper").
#
#   docker/tls/make-certs.sh OUTDIR [HOST...]
#
# HOST: the names and addresses the ZooKeeper servers are reached by; they go
# into the server certificate's subjectAltName (stunnel's checkHost/checkIP
# compare against it).  Always added: localhost and 127.0.0.1.  Default: the
# compose file's zk1 zk2 zk3 and the Kubernetes example's zk-N.zk-hs names.
#
# OUTDIR receives:
#
#   ca.pem                the CA certificate: stunnel's CAfile
#   zk-keystore.p12       ZooKeeper's key and certificate chain (PKCS12):
#                         ssl.keyStore.location
#   zk-truststore.p12     the CA, for ZooKeeper to check client certificates
#                         (PKCS12): ssl.trustStore.location
#   zk-store.password     the password of both stores:
#                         ssl.keyStore.passwordPath, ssl.trustStore.passwordPath
#   zkresp-client.pem     the client certificate and its key for stunnel's
#   zkresp-client.key     cert/key (needed when ssl.clientAuth=need)
#   NAME-client.pem/.key  the same for every further NAME of ZK_TLS_CLIENTS
#   zk-server.pem         the server certificate, for reference
#
# The CA's key is deleted once everything is signed, so nothing more can be
# issued under this CA.  Keys are written with mode ZK_TLS_KEY_MODE (default
# 0600); on a laptop, where containers run as other users, 0644 lets compose's
# bind mounts read them.  ZK_TLS_DAYS (default 30) is how long they last;
# ZK_TLS_STORE_PASSWORD sets the stores' password (default: random).
#
# ZK_TLS_CLIENTS (default "zkresp"): the client certificates to issue, one per
# name, each with CN=NAME.  ZooKeeper authenticates a connection that presents
# one as x509:CN=NAME, and a node zkresp creates with the creator ACL names
# that identity beside the digest credentials: whoever holds the certificate
# has the rights.  Give every application (every --root) its own.
#
# Needs openssl and keytool (the JDK that ZooKeeper runs on): Java reads a
# PKCS12 truststore only when its certificates carry Java's trust attribute,
# which keytool writes and Debian 12's openssl cannot.
set -euo pipefail

if [ $# -lt 1 ] || [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
    sed -n '2,/^set -e/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    exit 2
fi
out=$1
shift
hosts=("$@")
[ ${#hosts[@]} -gt 0 ] || hosts=(zk1 zk2 zk3 zk-0.zk-hs zk-1.zk-hs zk-2.zk-hs)
days=${ZK_TLS_DAYS:-30}
keymode=${ZK_TLS_KEY_MODE:-0600}
for tool in openssl keytool; do
    command -v "$tool" >/dev/null || { echo "make-certs: $tool not found" >&2; exit 1; }
done

mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/tls-make-certs-XXXXXX")
trap 'rm -rf "$work"' EXIT
umask 077

password=${ZK_TLS_STORE_PASSWORD:-$(openssl rand -hex 24)}
printf '%s' "$password" >"$work/zk-store.password"

san="DNS:localhost,IP:127.0.0.1"
for h in "${hosts[@]}"; do
    if [[ "$h" =~ ^[0-9.]+$ || "$h" == *:* ]]; then
        san="$san,IP:$h"
    else
        san="$san,DNS:$h"
    fi
done

# The CA.
openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days "$days" \
    -subj "/CN=zkresp throwaway ZooKeeper CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null

# sign NAME CN EXTENSIONS: a key and a certificate signed by the CA.
sign() {
    openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=$2" \
        -keyout "$work/$1.key" -out "$work/$1.csr" 2>/dev/null
    printf '%s\n' "$3" >"$work/$1.ext"
    openssl x509 -req -sha256 -days "$days" -in "$work/$1.csr" \
        -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
        -extfile "$work/$1.ext" -out "$work/$1.pem" 2>/dev/null
}

# The servers' certificate (one for the whole ensemble).  clientAuth too, so
# that a server's own health check (zkServer.sh status over TLS) can present
# it when ssl.clientAuth=need.
sign zk-server "zookeeper" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$san"

# The tunnels' client certificates.
read -r -a clients <<<"${ZK_TLS_CLIENTS:-zkresp}"
for c in "${clients[@]}"; do
    [[ "$c" =~ ^[A-Za-z0-9._-]+$ ]] || { echo "make-certs: bad client name $c" >&2; exit 2; }
    sign "$c-client" "$c" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
done

openssl pkcs12 -export -name zookeeper -in "$work/zk-server.pem" \
    -inkey "$work/zk-server.key" -certfile "$work/ca.pem" \
    -passout "file:$work/zk-store.password" -out "$work/zk-keystore.p12"
keytool -importcert -noprompt -alias zkresp-ca -file "$work/ca.pem" \
    -storetype PKCS12 -keystore "$work/zk-truststore.p12" \
    -storepass:file "$work/zk-store.password" >/dev/null 2>&1

for c in zk-server "${clients[@]/%/-client}"; do
    openssl verify -CAfile "$work/ca.pem" "$work/$c.pem" >/dev/null
done

for f in ca.pem zk-server.pem "${clients[@]/%/-client.pem}"; do
    install -m 0644 "$work/$f" "$out/$f"
done
for f in zk-keystore.p12 zk-truststore.p12 zk-store.password "${clients[@]/%/-client.key}"; do
    install -m "$keymode" "$work/$f" "$out/$f"
done
echo "make-certs: wrote $out (server names: ${hosts[*]} localhost 127.0.0.1;" \
    "clients: ${clients[*]}; valid $days days)"
