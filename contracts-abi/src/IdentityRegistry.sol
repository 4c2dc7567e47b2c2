// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/*
 * IdentityRegistry — ERC-8004 agent identity for local chains.
 *
 * Behaviour follows the ERC-8004 reference IdentityRegistryUpgradeable
 * (erc-8004/erc-8004-contracts, contracts/IdentityRegistryUpgradeable.sol), minus upgradeability:
 *   - agents are ERC-721 tokens ("AgentIdentity"/"AGENT"), ids start at 0 and are minted with
 *     _safeMint to msg.sender (a contract caller must implement onERC721Received);
 *   - register() mints without a URI: tokenURI returns "" (no revert) for such an agent;
 *   - `Registered(agentId, agentURI, owner)` is emitted before the ERC-721 Transfer;
 *   - getAgentWallet is msg.sender right after register, can be changed with an EIP-712 signature of
 *     the new wallet (setAgentWallet), and is cleared when the agent is transferred;
 *   - setAgentURI / setMetadata / setAgentWallet / unsetAgentWallet: owner, approved address or
 *     operator only (Error("Not authorized")); the metadata key "agentWallet" is reserved;
 *   - isAuthorizedOrOwner / ownerOf / tokenURI / getAgentWallet revert ERC721NonexistentToken for an
 *     unknown agent.
 */

import {ERC721} from "@openzeppelin/contracts/token/ERC721/ERC721.sol";
import {ERC721URIStorage} from "@openzeppelin/contracts/token/ERC721/extensions/ERC721URIStorage.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {SignatureChecker} from "@openzeppelin/contracts/utils/cryptography/SignatureChecker.sol";
import {IIdentityRegistry} from "./interfaces/IIdentityRegistry.sol";

contract IdentityRegistry is ERC721URIStorage, EIP712 {
    event Registered(uint256 indexed agentId, string agentURI, address indexed owner);
    event MetadataSet(
        uint256 indexed agentId, string indexed indexedMetadataKey, string metadataKey, bytes metadataValue
    );
    event URIUpdated(uint256 indexed agentId, string newURI, address indexed updatedBy);

    bytes32 private constant AGENT_WALLET_SET_TYPEHASH =
        keccak256("AgentWalletSet(uint256 agentId,address newWallet,address owner,uint256 deadline)");
    uint256 private constant MAX_DEADLINE_DELAY = 5 minutes;
    bytes32 private constant RESERVED_AGENT_WALLET_KEY_HASH = keccak256("agentWallet");

    uint256 private _lastId;
    mapping(uint256 agentId => mapping(string metadataKey => bytes metadataValue)) private _metadata;
    mapping(uint256 agentId => address wallet) private _agentWallet;

    constructor() ERC721("AgentIdentity", "AGENT") EIP712("ERC8004IdentityRegistry", "1") {}

    // ─── Registration ────────────────────────────────────────────────────

    function register() external returns (uint256 agentId) {
        agentId = _newAgent("");
        _safeMint(msg.sender, agentId);
    }

    function register(string calldata agentURI) external returns (uint256 agentId) {
        agentId = _newAgent(agentURI);
        _safeMint(msg.sender, agentId);
    }

    function register(string calldata agentURI, IIdentityRegistry.MetadataEntry[] calldata metadata)
        external
        returns (uint256 agentId)
    {
        agentId = _newAgent(agentURI);
        for (uint256 i; i < metadata.length; ++i) {
            _requireNotReserved(metadata[i].metadataKey);
            _metadata[agentId][metadata[i].metadataKey] = metadata[i].metadataValue;
            emit MetadataSet(agentId, metadata[i].metadataKey, metadata[i].metadataKey, metadata[i].metadataValue);
        }
        _safeMint(msg.sender, agentId);
    }

    function _newAgent(string memory agentURI) private returns (uint256 agentId) {
        agentId = _lastId++;
        _agentWallet[agentId] = msg.sender;
        if (bytes(agentURI).length > 0) _setTokenURI(agentId, agentURI);
        emit Registered(agentId, agentURI, msg.sender);
    }

    // ─── Agent data ──────────────────────────────────────────────────────

    function setAgentURI(uint256 agentId, string calldata newURI) external {
        _requireAuthorized(agentId);
        _setTokenURI(agentId, newURI);
        emit URIUpdated(agentId, newURI, msg.sender);
    }

    function getMetadata(uint256 agentId, string calldata metadataKey) external view returns (bytes memory) {
        return _metadata[agentId][metadataKey];
    }

    function setMetadata(uint256 agentId, string calldata metadataKey, bytes calldata metadataValue) external {
        _requireAuthorized(agentId);
        _requireNotReserved(metadataKey);
        _metadata[agentId][metadataKey] = metadataValue;
        emit MetadataSet(agentId, metadataKey, metadataKey, metadataValue);
    }

    function getAgentWallet(uint256 agentId) external view returns (address) {
        _requireOwned(agentId);
        return _agentWallet[agentId];
    }

    /// @notice Point the agent at a wallet that proves control with an EIP-712 signature (EOA) or
    ///         ERC-1271 (contract) over AgentWalletSet(agentId, newWallet, owner, deadline).
    function setAgentWallet(uint256 agentId, address newWallet, uint256 deadline, bytes calldata signature) external {
        require(newWallet != address(0), "bad wallet");
        require(block.timestamp <= deadline, "expired");
        require(deadline <= block.timestamp + MAX_DEADLINE_DELAY, "deadline too far");
        address agentOwner = _requireAuthorized(agentId);

        bytes32 digest =
            _hashTypedDataV4(keccak256(abi.encode(AGENT_WALLET_SET_TYPEHASH, agentId, newWallet, agentOwner, deadline)));
        require(SignatureChecker.isValidSignatureNow(newWallet, digest, signature), "invalid wallet sig");

        _setWallet(agentId, newWallet);
    }

    function unsetAgentWallet(uint256 agentId) external {
        _requireAuthorized(agentId);
        _setWallet(agentId, address(0));
    }

    function isAuthorizedOrOwner(address spender, uint256 agentId) external view returns (bool) {
        return _isAuthorized(_requireOwned(agentId), spender, agentId);
    }

    function getVersion() external pure returns (string memory) {
        return "2.0.0-local";
    }

    // ─── Internals ───────────────────────────────────────────────────────

    function _requireAuthorized(uint256 agentId) private view returns (address agentOwner) {
        agentOwner = _requireOwned(agentId);
        require(_isAuthorized(agentOwner, msg.sender, agentId), "Not authorized");
    }

    function _requireNotReserved(string calldata metadataKey) private pure {
        require(keccak256(bytes(metadataKey)) != RESERVED_AGENT_WALLET_KEY_HASH, "reserved key");
    }

    function _setWallet(uint256 agentId, address wallet) private {
        _agentWallet[agentId] = wallet;
        bytes memory value = wallet == address(0) ? bytes("") : abi.encodePacked(wallet);
        _metadata[agentId]["agentWallet"] = value;
        emit MetadataSet(agentId, "agentWallet", "agentWallet", value);
    }

    /// @dev Clears the verified wallet when an agent changes hands (not on mint or burn).
    function _update(address to, uint256 tokenId, address auth) internal override returns (address from) {
        from = super._update(to, tokenId, auth);
        if (from != address(0) && to != address(0)) _setWallet(tokenId, address(0));
    }
}
