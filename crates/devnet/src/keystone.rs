//! Chainlink's production KeystoneForwarder 1.0.0 on the devnet: deployed from the artifact
//! compiled from `@chainlink/contracts` 1.5.0's unmodified source, configured for a DON
//! (`setConfig`), and a `CREReceiver` that trusts a given forwarder, authorized on the
//! market. The devnet's own `TestForwarder` + receiver (see [`crate::Devnet::start`]) stay as
//! they are; these are extra deployments for tests of the signed report path.

use super::{Devnet, DevnetError, chain_err};
use alloy::primitives::Address;
use cresolver_chain::bindings::artifacts::{CREReceiver, KeystoneForwarder};

impl Devnet {
    /// Deploys the production KeystoneForwarder (owner: `accounts[0]`) and configures DON
    /// `don_id`, version `config_version`, with fault tolerance `f` and `signers` (the
    /// forwarder then wants exactly `f + 1` signatures from distinct `signers`; it refuses
    /// `f = 0`, more than 31 signers, or `signers.len() <= 3f`). Returns its address.
    pub async fn deploy_keystone_forwarder(
        &self,
        don_id: u32,
        config_version: u32,
        f: u8,
        signers: Vec<Address>,
    ) -> Result<Address, DevnetError> {
        let forwarder = KeystoneForwarder::deploy(&self.provider)
            .await
            .map_err(chain_err("deploying KeystoneForwarder"))?;
        let receipt = forwarder
            .setConfig(don_id, config_version, f, signers)
            .from(self.accounts[0])
            .send()
            .await
            .map_err(chain_err("KeystoneForwarder.setConfig"))?
            .get_receipt()
            .await
            .map_err(|e| DevnetError::Setup(e.to_string()))?;
        if !receipt.status() {
            return Err(DevnetError::Chain {
                what: "KeystoneForwarder.setConfig".into(),
                detail: format!("transaction {} reverted", receipt.transaction_hash),
            });
        }
        Ok(*forwarder.address())
    }

    /// Deploys a `CREReceiver` for the devnet's market that accepts reports only from
    /// `forwarder`, and authorizes it as a resolver of the market (as the devnet does for
    /// its own receiver). Returns its address.
    pub async fn deploy_receiver(&self, forwarder: Address) -> Result<Address, DevnetError> {
        let receiver = *CREReceiver::deploy(&self.provider, forwarder, self.contracts.market)
            .await
            .map_err(chain_err("deploying CREReceiver"))?
            .address();
        self.set_resolver(receiver, true).await?;
        Ok(receiver)
    }
}
