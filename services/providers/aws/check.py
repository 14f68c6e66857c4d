"""``corral check`` for AWS: credentials from boto3's chain, who they are (STS), and whether
EC2 answers them in the first region Corral plans in. Nothing secret is printed: the caller's
ARN and account only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from corral.services.providers.base import CloudCheck

if TYPE_CHECKING:
    from corral.services.providers.aws.provider import AwsProvider

CHAIN = "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws/credentials, an instance role"


def check(provider: AwsProvider) -> CloudCheck:
    """Found, who, and EC2's answer; every failure named by its code, never a traceback."""
    try:
        found = provider.session().get_credentials()
    except BotoCoreError as exc:  # a profile named in the environment that does not exist
        return CloudCheck(False, None, f"credentials could not be read: {exc}")
    if found is None:
        return CloudCheck(False, None, f"no credentials found (boto3 looks in {CHAIN})")
    region = (provider.regions() or ("us-east-1",))[0]
    try:
        who = provider.client(region, service="sts").get_caller_identity()
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "error")
        return CloudCheck(False, None, f"credentials refused by STS: {code}")
    except BotoCoreError as exc:
        return CloudCheck(False, None, f"STS did not answer: {type(exc).__name__}")
    identity = str(who.get("Arn") or who.get("UserId") or "")
    try:
        zones = provider.client(region).describe_availability_zones()["AvailabilityZones"]
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "error")
        return CloudCheck(False, identity, f"EC2 refused these credentials in {region}: {code}")
    except BotoCoreError as exc:
        return CloudCheck(False, identity, f"EC2 did not answer in {region}: {type(exc).__name__}")
    return CloudCheck(
        True,
        identity,
        f"account {who.get('Account')}; EC2 answered in {region} ({len(zones)} zones)",
    )
