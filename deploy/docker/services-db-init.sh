#!/bin/sh
# The shared PostgreSQL server of collector, recipe server and token issuer (docker-compose.yml):
# each service gets a login role of its own, with the password `sagg keys init` generated for it
# (a compose secret of this container only), owning its databases; the token issuer and the
# attester are separate services with a role each (the split model, RFC 9576 §4.4). No role can open another's
# database: PUBLIC loses CONNECT. Runs once, as postgres, when the data volume is first
# initialised. The aggregators never use this server: leader and helper each have their own.
set -eu

create() {  # role, secret name, databases...
    role=$1
    # Passwords stay out of argv (visible in ps); token_urlsafe holds no quote to escape.
    password=$(cat "/run/secrets/$2")
    shift 2
    psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<SQL
CREATE ROLE $role LOGIN PASSWORD '$password';
SQL
    for db in "$@"; do
        psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<SQL
CREATE DATABASE $db OWNER $role;
REVOKE CONNECT ON DATABASE $db FROM PUBLIC;
SQL
    done
}

create collector collector-db-password collector
create recipe_server recipe-server-db-password recipe_server
create token_issuer token-issuer-db-password token_issuer
create token_attester token-attester-db-password token_attester
