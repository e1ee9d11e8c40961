//! The AWS configuration every client here starts from.

/// The shared AWS configuration: the standard credential and region chain,
/// `region` and `endpoint_url` when given (a local SQS-compatible server, a
/// VPC endpoint), and an HTTPS client on rustls with ring (the relay's
/// other TLS clients use ring; a second provider in the process would make
/// rustls refuse to pick one).
pub async fn sdk_config(region: Option<&str>, endpoint_url: Option<&str>) -> aws_config::SdkConfig {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http);
    if let Some(r) = region {
        loader = loader.region(aws_config::Region::new(r.to_owned()));
    }
    if let Some(e) = endpoint_url {
        loader = loader.endpoint_url(e);
    }
    loader.load().await
}

/// The SDK client `held` holds, or a new one `make` builds from the shared
/// configuration (again after a reset, which drops its connections and
/// cached credentials).
#[cfg(feature = "sink")]
pub(crate) async fn held<C: Clone>(
    held: &postbox_relay::Reconnecting<C>,
    region: Option<&str>,
    endpoint_url: Option<&str>,
    make: fn(&aws_config::SdkConfig) -> C,
) -> C {
    let client = held
        .get(|| async { Ok(make(&sdk_config(region, endpoint_url).await)) })
        .await;
    client.expect("making an SDK client does not fail")
}
