// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title IMulticall3
/// @notice Subset of the canonical Multicall3 (0xcA11bde05977b3631167028862bE2a173976CA11) ABI.
interface IMulticall3 {
    struct Call3 {
        address target;
        bool allowFailure;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    function aggregate3(Call3[] calldata calls) external payable returns (Result[] memory returnData);
    function getBlockNumber() external view returns (uint256 blockNumber);
    function getChainId() external view returns (uint256 chainid);
    function getCurrentBlockTimestamp() external view returns (uint256 timestamp);
    function getEthBalance(address addr) external view returns (uint256 balance);
}
