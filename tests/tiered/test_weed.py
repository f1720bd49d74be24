"""The object store the tiered-storage tests run against is a real SeaweedFS: objects survive a kill -9 of
``weed``, and the S3 gateway refuses wrong credentials and unknown buckets with S3's own error codes."""
from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.tiered.conftest import s3_client

pytestmark = [pytest.mark.tiered]


def test_objects_survive_a_kill_of_weed(weed_factory):
    server = weed_factory()
    s3 = s3_client(server)
    s3.create_bucket(Bucket="survives")
    s3.put_object(Bucket="survives", Key="a/00000000000000000000-x.log", Body=b"segment bytes")
    assert server.kill9()
    server.start()
    body = s3_client(server).get_object(Bucket="survives", Key="a/00000000000000000000-x.log")["Body"].read()
    assert body == b"segment bytes"


def test_wrong_credentials_and_missing_bucket_are_refused(weed, bucket):
    bad = boto3.client("s3", endpoint_url=weed.endpoint_url, aws_access_key_id="nobody",
                       aws_secret_access_key="wrong", region_name="us-east-1")
    with pytest.raises(ClientError) as refused:
        bad.list_objects_v2(Bucket=bucket)
    assert refused.value.response["Error"]["Code"] == "InvalidAccessKeyId"
    with pytest.raises(ClientError) as missing:
        s3_client(weed).list_objects_v2(Bucket=bucket + "-absent")
    assert missing.value.response["Error"]["Code"] == "NoSuchBucket"
    assert s3_client(weed).list_objects_v2(Bucket=bucket)["KeyCount"] == 0
