-- The shared PostgreSQL server of collector, recipe server and token issuer: one database each
-- (the issuer's and the attester's state apart, RFC 9576 §4.2). POSTGRES_DB creates the
-- collector's; these run once, when the server's data volume is first initialised.
-- The aggregators never use this server: leader and helper each have their own.
CREATE DATABASE recipe_server;
CREATE DATABASE token_issuer;
CREATE DATABASE token_attester;
