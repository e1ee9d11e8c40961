//! Standard Webhooks signatures: HMAC-SHA256 over `{id}.{timestamp}.{body}`
//! with a key given as `whsec_` + base64, sent as `v1,<base64>`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A signing key, decoded from its `whsec_…` form.
#[derive(Clone)]
pub struct SigningKey(Vec<u8>);

/// A secret that is not a Standard Webhooks key.
#[derive(Debug, thiserror::Error)]
#[error("a webhook secret must be `whsec_` followed by base64 (24 to 64 random bytes; e.g. `echo whsec_$(openssl rand -base64 32)`): {0}")]
pub struct KeyError(&'static str);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(***)")
    }
}

impl SigningKey {
    /// `whsec_<base64>`; the prefix may be left out.
    pub fn from_secret(secret: &str) -> Result<Self, KeyError> {
        let b64 = secret
            .trim()
            .strip_prefix("whsec_")
            .unwrap_or(secret.trim());
        let bytes = STANDARD
            .decode(b64)
            .map_err(|_| KeyError("not valid base64"))?;
        if bytes.len() < 24 || bytes.len() > 64 {
            return Err(KeyError("the decoded key must be 24 to 64 bytes"));
        }
        Ok(SigningKey(bytes))
    }

    fn mac(&self, id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    /// `v1,<base64 signature>`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        format!(
            "v1,{}",
            STANDARD.encode(self.mac(id, timestamp, body).finalize().into_bytes())
        )
    }

    /// Whether `signature` (base64, without `v1,`) is this key's, compared in
    /// constant time.
    pub fn verifies(&self, id: &str, timestamp: i64, body: &[u8], signature: &str) -> bool {
        match STANDARD.decode(signature) {
            Ok(sig) => self.mac(id, timestamp, body).verify_slice(&sig).is_ok(),
            Err(_) => false,
        }
    }
}

/// The `webhook-signature` value for every key (rotation: receivers accept
/// any one of them).
#[cfg(feature = "sink")]
pub fn header(keys: &[SigningKey], id: &str, timestamp: i64, body: &[u8]) -> String {
    keys.iter()
        .map(|k| k.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example of the Standard Webhooks specification's reference libraries.
    #[test]
    fn signs_like_the_reference_implementations() {
        let key = SigningKey::from_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = key.sign(
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert!(key.verifies(
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
            "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        ));
        assert!(SigningKey::from_secret("whsec_!!").is_err());
        assert!(SigningKey::from_secret("whsec_c2hvcnQ=").is_err());
        assert_eq!(format!("{key:?}"), "SigningKey(***)");
    }
}
