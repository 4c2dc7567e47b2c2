// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/*
 * CREReceiver — delivers CRE resolution reports from a Keystone forwarder to CREsolverMarket.
 *
 * Deploy with (forwarder, market), then have the market owner call
 * market.setAuthorizedResolver(receiver, true): the receiver is the resolver for reports.
 *
 * onReport(metadata, report), in order:
 *   1. InvalidSender(msg.sender, forwarder)        unless msg.sender is the configured forwarder;
 *   2. InvalidMetadataLength(length)               metadata shorter than 64 bytes;
 *   3. metadata is decoded with the layout KeystoneForwarder 1.0.0 really delivers
 *      (rawReport[45:109]): workflowId bytes32 [0:32] | workflowName bytes10 [32:42] |
 *      workflowOwner address [42:62] | reportId bytes2 [62:64]
 *      (the public reference receiver reads [32:64] as a "donId", which is wrong for this layout);
 *   4. optional identity checks, each skipped while its expected value is zero (owner-settable):
 *      InvalidWorkflowId(received, expected), InvalidAuthor(received, expected),
 *      InvalidWorkflowName(received, expected) — names as in Chainlink's ReceiverTemplate;
 *   5. report = abi.encode(uint256 marketId, address[] workers, uint256[] weights, uint8[] dimScores,
 *      bool resolution) is decoded (malformed bytes revert without data);
 *   6. ReportReceived(marketId, workflowId, workflowOwner, workflowName, reportId) is emitted and
 *      market.resolveMarket(...) is called; any market revert bubbles up unchanged, so the forwarder
 *      records the delivery as failed (ReportProcessed(..., false)).
 */

import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";
import {ERC165} from "@openzeppelin/contracts/utils/introspection/ERC165.sol";
import {IERC165} from "@openzeppelin/contracts/utils/introspection/IERC165.sol";
import {IReceiver} from "./interfaces/IReceiver.sol";
import {ICREsolverMarket} from "./interfaces/ICREsolverMarket.sol";

contract CREReceiver is IReceiver, ERC165, Ownable {
    uint256 internal constant METADATA_LENGTH = 64;

    ICREsolverMarket public immutable market;
    address public forwarder;

    /// @notice Zero means "not checked".
    bytes32 public expectedWorkflowId;
    address public expectedWorkflowOwner;
    bytes10 public expectedWorkflowName;

    event ReportReceived(
        uint256 indexed marketId,
        bytes32 indexed workflowId,
        address indexed workflowOwner,
        bytes10 workflowName,
        bytes2 reportId
    );
    event ForwarderUpdated(address indexed previousForwarder, address indexed newForwarder);
    event ExpectedWorkflowIdUpdated(bytes32 workflowId);
    event ExpectedWorkflowOwnerUpdated(address workflowOwner);
    event ExpectedWorkflowNameUpdated(bytes10 workflowName);

    error ZeroAddress();
    error InvalidSender(address sender, address expected);
    error InvalidMetadataLength(uint256 length);
    error InvalidWorkflowId(bytes32 received, bytes32 expected);
    error InvalidAuthor(address received, address expected);
    error InvalidWorkflowName(bytes10 received, bytes10 expected);

    constructor(address forwarder_, address market_) Ownable(msg.sender) {
        if (forwarder_ == address(0) || market_ == address(0)) revert ZeroAddress();
        forwarder = forwarder_;
        market = ICREsolverMarket(market_);
        emit ForwarderUpdated(address(0), forwarder_);
    }

    /// @inheritdoc IReceiver
    function onReport(bytes calldata metadata, bytes calldata report) external override {
        if (msg.sender != forwarder) revert InvalidSender(msg.sender, forwarder);
        (bytes32 workflowId, bytes10 workflowName, address workflowOwner, bytes2 reportId) = decodeMetadata(metadata);

        bytes32 wantId = expectedWorkflowId;
        if (wantId != bytes32(0) && workflowId != wantId) revert InvalidWorkflowId(workflowId, wantId);
        address wantOwner = expectedWorkflowOwner;
        if (wantOwner != address(0) && workflowOwner != wantOwner) revert InvalidAuthor(workflowOwner, wantOwner);
        bytes10 wantName = expectedWorkflowName;
        if (wantName != bytes10(0) && workflowName != wantName) revert InvalidWorkflowName(workflowName, wantName);

        (
            uint256 marketId,
            address[] memory workers,
            uint256[] memory weights,
            uint8[] memory dimScores,
            bool resolution
        ) = abi.decode(report, (uint256, address[], uint256[], uint8[], bool));

        emit ReportReceived(marketId, workflowId, workflowOwner, workflowName, reportId);
        market.resolveMarket(marketId, workers, weights, dimScores, resolution);
    }

    /// @notice Splits the 64-byte Keystone metadata into its fields.
    function decodeMetadata(bytes calldata metadata)
        public
        pure
        returns (bytes32 workflowId, bytes10 workflowName, address workflowOwner, bytes2 reportId)
    {
        if (metadata.length < METADATA_LENGTH) revert InvalidMetadataLength(metadata.length);
        workflowId = bytes32(metadata[0:32]);
        workflowName = bytes10(metadata[32:42]);
        workflowOwner = address(bytes20(metadata[42:62]));
        reportId = bytes2(metadata[62:64]);
    }

    /// @inheritdoc IERC165
    function supportsInterface(bytes4 interfaceId) public view override(ERC165, IERC165) returns (bool) {
        return interfaceId == type(IReceiver).interfaceId || super.supportsInterface(interfaceId);
    }

    // ─── Administration ──────────────────────────────────────────────────

    function setForwarder(address newForwarder) external onlyOwner {
        if (newForwarder == address(0)) revert ZeroAddress();
        emit ForwarderUpdated(forwarder, newForwarder);
        forwarder = newForwarder;
    }

    function setExpectedWorkflowId(bytes32 workflowId) external onlyOwner {
        expectedWorkflowId = workflowId;
        emit ExpectedWorkflowIdUpdated(workflowId);
    }

    function setExpectedWorkflowOwner(address workflowOwner) external onlyOwner {
        expectedWorkflowOwner = workflowOwner;
        emit ExpectedWorkflowOwnerUpdated(workflowOwner);
    }

    function setExpectedWorkflowName(bytes10 workflowName) external onlyOwner {
        expectedWorkflowName = workflowName;
        emit ExpectedWorkflowNameUpdated(workflowName);
    }
}
