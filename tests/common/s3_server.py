"""A real S3-compatible server on 127.0.0.1 for the S3 source tests (tests/common/s3.rs):
moto's server (`moto[server]`, in the venv `scripts/test` makes) in this process, with its IAM
authentication on, so every signed request's Signature V4 is computed again by moto (botocore's
signer) and compared, and an unknown key, a wrong secret or a wrong session token is refused.

Usage: s3_server.py DIR...   Each DIR is uploaded, under its own name, into two buckets:
`private` (signed requests only) and `public` (anonymous reads allowed). Prints one JSON line
(endpoint, an IAM user's key, a session's key and token, an expired session's) and serves until
its stdin closes; a line `expire` on stdin expires the (valid) session from then on.

The public bucket's anonymous reads come from a bucket policy, which moto applies to objects. What
moto does not do, this file adds, as S3 does it: an anonymous request of another kind (a HEAD, a
listing) is allowed in the public bucket only, else `403 AccessDenied` (moto's IAM check fails on
a request without `Authorization`), and a session past its expiry is `400 ExpiredToken` (moto
never checks expiry). Both are patches of moto's checks, named below; the signature check itself
is moto's own.
"""
import datetime
import json
import os
import sys
from urllib.parse import urlparse

import boto3
from moto import settings
from moto.core import authorization
from moto.iam import access_control
from moto.s3.exceptions import S3AccessDeniedError, S3ClientError
from moto.server import ThreadedMotoServer
from moto.sts.models import sts_backends


class ExpiredToken(S3ClientError):
    code = 400

    def __init__(self):
        super().__init__("ExpiredToken", "The provided token has expired.")


_authenticate = authorization.ActionAuthenticatorMixin._authenticate_and_authorize_action


def authenticate(self, iam_request_cls, resource="*"):
    auth_on = settings.INITIAL_NO_AUTH_ACTION_COUNT == 0
    if auth_on and "Authorization" not in self.headers:
        path = urlparse(self.uri).path
        if (path == "/public" or path.startswith("/public/")) and self.method in ("GET", "HEAD"):
            return
        raise S3AccessDeniedError()
    return _authenticate(self, iam_request_cls, resource)


authorization.ActionAuthenticatorMixin._authenticate_and_authorize_action = authenticate

_assumed_init = access_control.AssumedRoleAccessKey.__init__


def assumed_init(self, account_id, partition, access_key_id, headers):
    _assumed_init(self, account_id, partition, access_key_id, headers)
    for role in sts_backends[account_id][partition].assumed_roles:
        if role.access_key_id == access_key_id and role.expiration < now():
            raise ExpiredToken()


access_control.AssumedRoleAccessKey.__init__ = assumed_init


def now():
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def main():
    settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    setup = dict(
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="setup",
        aws_secret_access_key="setup",
    )
    iam = boto3.client("iam", **setup)
    sts = boto3.client("sts", **setup)
    s3 = boto3.client("s3", **setup)
    allow = json.dumps(
        {"Version": "2012-10-17",
         "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    )
    iam.create_user(UserName="daf")
    iam.put_user_policy(UserName="daf", PolicyName="s3", PolicyDocument=allow)
    key = iam.create_access_key(UserName="daf")["AccessKey"]
    trust = json.dumps(
        {"Version": "2012-10-17",
         "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]}
    )
    role = iam.create_role(RoleName="reader", AssumeRolePolicyDocument=trust)["Role"]
    iam.put_role_policy(RoleName="reader", PolicyName="s3", PolicyDocument=allow)

    def session(name):
        c = sts.assume_role(RoleArn=role["Arn"], RoleSessionName=name)["Credentials"]
        return {"key": c["AccessKeyId"], "secret": c["SecretAccessKey"], "token": c["SessionToken"]}

    valid, expired = session("valid"), session("expired")
    for bucket in ("private", "public"):
        s3.create_bucket(Bucket=bucket)
        for top in sys.argv[1:]:
            top = top.rstrip("/")
            base = os.path.dirname(top)
            for dirpath, _, files in os.walk(top):
                for name in files:
                    path = os.path.join(dirpath, name)
                    with open(path, "rb") as f:
                        s3.put_object(Bucket=bucket, Key=os.path.relpath(path, base), Body=f.read())
    # Anonymous reads of the public bucket, as S3 allows them: a bucket policy.
    s3.put_bucket_policy(Bucket="public", Policy=json.dumps(
        {"Version": "2012-10-17",
         "Statement": [{"Effect": "Allow", "Principal": "*",
                        "Action": ["s3:GetObject", "s3:HeadObject", "s3:ListBucket"],
                        "Resource": ["arn:aws:s3:::public", "arn:aws:s3:::public/*"]}]}
    ))
    roles = sts_backends[role["Arn"].split(":")[4]]["global"].assumed_roles

    def expire(access_key_id):
        for r in roles:
            if r.access_key_id == access_key_id:
                r.expiration = now() - datetime.timedelta(minutes=1)

    expire(expired["key"])
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0  # from here on, every request is authenticated
    print(json.dumps({
        "endpoint": endpoint,
        "user": {"key": key["AccessKeyId"], "secret": key["SecretAccessKey"]},
        "session": valid,
        "expired": expired,
    }), flush=True)
    for line in sys.stdin:
        if line.strip() == "expire":
            expire(valid["key"])
            print("expired", flush=True)
    server.stop()


if __name__ == "__main__":
    main()
